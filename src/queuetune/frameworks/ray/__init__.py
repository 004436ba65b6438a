"""Ray Data: a ``Dataset`` read by ``iter_batches``/``iter_torch_batches``.

:mod:`.spec` says what queuetune knows of it without importing it (its settings,
depth, rules, estimate); :mod:`.watch` acts on its live loaders."""
