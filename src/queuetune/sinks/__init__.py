"""Live sinks: readings of a running program written as they come (the live
line on the terminal, TensorBoard scalars), apart from :mod:`queuetune.render`,
which turns finished results into text, HTML, Perfetto and figures."""
