"""queuetune: measure, estimate and right-size the batch queues of input pipelines."""
__version__ = "0.1.0"
