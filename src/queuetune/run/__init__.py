"""What ``queuetune run`` needs below its presentation: running the program
(:mod:`.runner`), how it ended (:mod:`.endings`), and what it found, as data
(:mod:`.result`)."""
