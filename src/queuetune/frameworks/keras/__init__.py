"""Keras 3: a ``PyDataset`` read by ``fit``/``predict``/``evaluate``, and a plain generator handed to Keras.

:mod:`.spec` says what queuetune knows of it without importing it (its settings,
depth, rules, estimate); :mod:`.watch` acts on its live loaders."""
