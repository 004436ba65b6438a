"""The Prefetcher's device stage: batches staged into pinned host buffers that
are reused, and copied to a CUDA device on a stream of their own, ahead of the
consumer within a depth and budgets in bytes.

settings.py (the keyword arguments checked), transfer.py (what a copy to the
device is asked; a stand-in on the host), cuda.py (torch's copy, torch imported
only there), pinned.py (the buffers, reused), leaves.py (a batch's leaves that
move), stage.py (one epoch's copies ahead), staging.py (what is kept across
epochs), seam.py (where tests stand in a transfer of their own).
"""
