"""The ``queuetune`` command line: parses arguments and wires them to the library
(:mod:`.commands`), one module a group of commands."""

from __future__ import annotations

from .arguments import Command
from .commands import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "Command", "build_parser", "main"]
