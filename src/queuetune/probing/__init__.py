"""Watching a loader: the probe a watched loader records through
(:mod:`.probe`), and the session that watches every loader of a program
(:mod:`.session`)."""
