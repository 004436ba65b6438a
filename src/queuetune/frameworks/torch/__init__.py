"""PyTorch: a ``DataLoader``, with or without worker processes.

:mod:`.spec` says what queuetune knows of it without importing it (its settings,
depth, rules, estimate); :mod:`.watch` acts on its live loaders."""
