"""Recording: what a loader built and handed over, as it happened. The trace
(:mod:`.trace`) and the recorder that fills it (:mod:`.recorder`), from worker
threads and processes; the bytes of a batch, its samples' fingerprints, the
process tree's memory as the kernel counts it, and the matching of batches
built to batches consumed."""
