"""Any iterable (a generator, a list, an iterator), and a loader that reads nothing ahead.

:mod:`.spec` says what queuetune knows of it without importing it (its settings,
depth, rules, estimate); :mod:`.watch` acts on its live loaders."""
