"""Run a Python script or module in this process as ``python script.py`` or
``python -m module`` would: its ``sys.argv``, ``__main__``, its traceback as
Python prints it, and its exit code."""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import traceback
from dataclasses import dataclass
from types import TracebackType


@dataclass(frozen=True)
class Target:
    """What to run: a script's path or a module's name, and its arguments.

    >>> Target("train.py", args=["--epochs", "2"]).argv()
    ['train.py', '--epochs', '2']
    """

    path: str | None = None
    module: str | None = None
    args: tuple[str, ...] | list[str] = ()

    def argv(self) -> list[str]:
        """``sys.argv`` as the program sees it (a module's is its file, as with ``-m``)."""
        if self.module is not None:
            spec = importlib.util.find_spec(self.module)
            origin = spec.origin if spec is not None and spec.origin else self.module
            return [origin, *self.args]
        return [str(self.path), *self.args]

    def check(self) -> None:
        """A ValueError naming the problem when the script or module cannot be found."""
        if (self.path is None) == (self.module is None):
            raise ValueError("give a script or -m module, not both")
        if self.path is not None:
            if not os.path.exists(self.path):
                raise ValueError(f"no such script: {self.path}")
            if not os.path.isfile(self.path):
                raise ValueError(f"not a file: {self.path}")
            return
        assert self.module is not None
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise ValueError(f"no module named {self.module!r}")


def run(target: Target) -> int:
    """Run ``target`` as ``__main__`` with its arguments; return its exit code.

    ``sys.exit(n)`` gives ``n`` (a message: printed, 1); an exception is printed
    as Python prints it (from the program's own frames) and gives 1; Ctrl-C
    gives 130. ``sys.argv`` and ``sys.path[0]`` are restored afterwards.

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "job.py")
    ...     with open(path, "w") as f:
    ...         _ = f.write("import sys; sys.exit(int(sys.argv[1]))")
    ...     run(Target(path, args=["3"]))
    3
    """
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = target.argv()
    if target.path is not None:
        folder = os.path.dirname(os.path.abspath(target.path))
    else:
        folder = os.getcwd()
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.append(folder)
    try:
        if target.module is not None:
            runpy.run_module(target.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(str(target.path), run_name="__main__")
    except SystemExit as exc:
        return exit_code(exc)
    except KeyboardInterrupt as exc:
        _print_exception(exc, target)
        return 130
    except BaseException as exc:  # the program's own error, printed as Python would
        _print_exception(exc, target)
        return 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
    return 0


def exit_code(exc: SystemExit) -> int:
    """The exit code Python gives for ``exc`` (a message is printed to stderr).

    >>> exit_code(SystemExit(3)), exit_code(SystemExit()), exit_code(SystemExit(-1))
    (3, 0, 255)
    """
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code) & 0xFF
    print(code, file=sys.stderr)
    return 1


def _print_exception(exc: BaseException, target: Target) -> None:
    sys.stderr.flush()
    traceback.print_exception(type(exc), exc, _own_frames(exc.__traceback__, target), file=sys.stderr)


def _own_frames(tb: TracebackType | None, target: Target) -> TracebackType | None:
    """The traceback from the program's first frame on (runpy's and ours dropped)."""
    first = os.path.abspath(target.argv()[0])
    start = tb
    while start is not None:
        if os.path.abspath(start.tb_frame.f_code.co_filename) == first:
            return start
        start = start.tb_next
    return tb
