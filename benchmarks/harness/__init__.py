"""What the benchmarks share: the workloads, the loaders they compare, the rounds
interleaved, the process tree's memory sampled, and the results written.

A benchmark script imports what it needs from these modules and says only what
it compares (``sys.path`` holds ``benchmarks/`` when a script runs).
"""
