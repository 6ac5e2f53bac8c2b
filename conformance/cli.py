"""The ``int8conf`` command line.

``main`` builds an argparse parser whose subcommands come from the modules of
``conformance.commands``: every module there defines ``register(subparsers)
-> None``, adding its subparser(s) and setting ``func`` (called with the
parsed namespace, returning the exit code) via ``set_defaults``. A command
module that fails to import is reported as one warning line and skipped, so
one broken command cannot take the others down.

Exit codes: what the command returns (``check``: 0 conformant, 1 not
conformant, 3 not run / inconclusive); 2 for a usage error, any
``reference.errors.Int8confError``, or an ``OSError`` reading or writing a
file (e.g. ``--out`` naming a file), printed as ``int8conf: error: <one
line>`` on stderr (the OSError line names the path).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import Optional, Sequence

from reference.errors import Int8confError


def _os_error_line(e: OSError) -> str:
    """One line naming the path and the reason of an OSError."""
    paths = [str(x) for x in (e.filename, e.filename2) if x is not None]
    why = e.strerror or (str(e).splitlines()[0] if str(e) else "cannot access")
    return (f"{' -> '.join(paths)}: " if paths else "") + f"{why} ({type(e).__name__})"


def build_parser() -> argparse.ArgumentParser:
    """The parser with every command module's subcommands registered."""
    import conformance.commands as commands

    parser = argparse.ArgumentParser(
        prog="int8conf",
        description="Fault-injection conformance framework for INT8 (W8A8) GEMM kernels.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        try:
            mod = importlib.import_module(f"{commands.__name__}.{info.name}")
            reg = getattr(mod, "register")
            reg(sub)
        except Exception as e:  # noqa: BLE001 -- keep the other commands usable
            line = str(e).splitlines()[0] if str(e) else ""
            print(f"int8conf: warning: command module {info.name!r} not loaded: "
                  f"{type(e).__name__}: {line}", file=sys.stderr)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``int8conf`` console script.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit code (the console script passes it to ``sys.exit``).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Int8confError as e:
        line = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"int8conf: error: {line}", file=sys.stderr)
        return 2
    except OSError as e:  # a report / output path the user gave is unusable
        print(f"int8conf: error: {_os_error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("int8conf: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
