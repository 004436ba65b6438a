"""The command line's vocabulary: its parser, a command, the argument types (argparse turns
their errors into "argument --x: <message>"), and the errors a command reports."""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from queuetune.common.units import _shown, nonnegative_int, positive_int, unit_factor

if TYPE_CHECKING:
    pass


PROG = "queuetune"
USAGE_ERROR = 2
# The exit code of a command stopped by Ctrl-C: 128 + SIGINT.
INTERRUPTED = 130


class UsageError(ValueError):
    """A command line argparse rejected."""


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Abbreviations would change meaning as subcommands gain options.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


@dataclass(frozen=True)
class Command:
    """A subcommand: ``configure`` adds its arguments, ``run`` does the work and returns the exit code."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# Argument types: argparse turns ArgumentTypeError into "argument --x: <message>".


def argument_type(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return convert(text)
        except (ValueError, TypeError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = convert.__name__
    return parse


_INT_RE = re.compile(r"[+-]?[0-9]+")


def integer(text: str) -> int:
    # ASCII digits only, as in shapes and byte sizes: int() would also take "1_000" and "\u0663".
    stripped = text.strip()
    if not _INT_RE.fullmatch(stripped):
        raise ValueError(f"expected an integer, got {_shown(text)}")
    if len(stripped.lstrip("+-").lstrip("0")) > 19 or abs(int(stripped)) >= 2**63:
        raise ValueError(f"integer {_shown(text)} is too large (2^63 or more)")
    return int(stripped, 10)


def positive(what: str) -> Callable[[str], int]:
    return argument_type(lambda text: positive_int(integer(text), what))


def nonnegative(what: str) -> Callable[[str], int]:
    return argument_type(lambda text: nonnegative_int(integer(text), what))


def int_list(what: str) -> Callable[[str], list[int]]:
    def parse(text: str) -> list[int]:
        parts = text.split(",")
        return [positive_int(integer(part), what) for part in parts]

    return argument_type(parse)


def number(text: str) -> float:
    try:
        if not text.isascii():
            raise ValueError
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {_shown(text)}") from None


def labels(text: str) -> int | str:
    if text.strip() == "int":
        return "int"
    try:
        classes = integer(text)
    except ValueError:
        raise ValueError(f"expected a number of classes or 'int', got {_shown(text)}") from None
    return positive_int(classes, "number of classes")


def unit(text: str) -> str:
    return unit_factor(text)[0]


class FactoryFailed(Exception):
    """A user's factory (``queuetune tune FILE:NAME``) raised: the message names
    it and its exception; ``traceback`` is the factory's own, without queuetune's frames."""

    def __init__(self, factory: str, exc: BaseException) -> None:
        super().__init__(
            f"{factory} raised {type(exc).__name__}: {exc}" if str(exc) else f"{factory} raised {type(exc).__name__}"
        )
        tb = exc.__traceback__
        while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next
        self.traceback = "".join(traceback.format_exception(type(exc), exc, tb))


# queuetune's own source folder, whose frames a factory's traceback leaves out.
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_ours(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_OURS)


def guarded(name: str, factory: Callable[..., Any]) -> Callable[..., Any]:
    """``factory``, whose exceptions become :class:`FactoryFailed`."""

    @functools.wraps(factory)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return factory(*args, **kwargs)
        except Exception as exc:
            raise FactoryFailed(name, exc) from None

    return call


def file_error(exc: OSError) -> str:
    """An OSError as one line naming the file first.

    >>> file_error(FileNotFoundError(2, "No such file or directory", "/missing/x.png"))
    '/missing/x.png: No such file or directory'
    """
    if exc.filename is None:
        return str(exc) or type(exc).__name__
    return f"{os.fsdecode(exc.filename)}: {exc.strerror or exc}"


def reader_gone() -> None:
    """What reads our output went away (``queuetune report DIR | head``): nothing
    more is said, now or as Python exits."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (a test's capture): nothing is flushed to a pipe at exit
        pass


def together(contexts: list[Callable[[Any], Any]]) -> Callable[[Any], Any] | None:
    """One context that enters each of ``contexts(session)`` in turn."""
    if not contexts:
        return None

    def enter(session: Any) -> Any:
        from contextlib import ExitStack

        stack = ExitStack()
        with stack:
            for make in contexts:
                stack.enter_context(make(session))
            return stack.pop_all()

    return enter
