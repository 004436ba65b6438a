"""Estimates made before anything runs: the bytes a loader's queue will hold
(:mod:`.footprint`), and the article's experiment as data (:mod:`.experiment`)."""
