"""The ``int8conf`` command line: one subcommand per module of ``conformance.commands`` (each
defines ``register(subparsers)``, setting ``func``: namespace -> exit code). A command module that
fails to import is one warning line and skipped.

Exit codes: the command's own; 2 for a usage error, an ``Int8confError`` or an ``OSError`` on a
file, printed as ``int8conf: error: <one line>``; 130 interrupted. An unknown option is reported
(with the closest names) before any "required option missing"; the current directory goes first
on ``sys.path`` (``--kernel pkg.module:function``); help texts show docstring markup as plain text.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import pkgutil
import re
import sys
import traceback
from typing import Optional, Sequence

import conformance.commands as commands
from conformance.kernels.loader import cwd_on_sys_path
from conformance.runtime import exit_codes
from conformance.runtime.graceful_stop import (
    record_interrupts,
    restore_interrupts,
    restore_sigterm,
    sigterm_as_interrupt,
)
from conformance.runtime.import_noise import silence_import_noise
from reference.errors import Int8confError, first_line


def _os_error_line(e: OSError) -> str:
    paths = [str(x) for x in (e.filename, e.filename2) if x is not None]
    why = e.strerror or first_line(e, None) or "cannot access"
    return (f"{' -> '.join(paths)}: " if paths else "") + f"{why} ({type(e).__name__})"


_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc):`~?([^`]+)`")


def strip_markup(text: str) -> str:
    """Docstring markup -> plain help text: ````x```` -> ``x``, ``:func:`x``` -> ``x``."""
    return _ROLE.sub(r"\1", text or "").replace("``", "") if text else text


def plain_help_formatter(base: type) -> type:
    """A subclass of the argparse formatter ``base`` showing docstring markup as plain text."""
    if getattr(base, "_strips_markup", False):
        return base

    class Plain(base):
        _strips_markup = True

        def _format_text(self, text):
            return super()._format_text(strip_markup(text))

        def _expand_help(self, action):
            return strip_markup(super()._expand_help(action))

        def _format_usage(self, usage, actions, groups, prefix):
            return strip_markup(super()._format_usage(usage, actions, groups, prefix))

    return Plain


def _subparsers(parser: argparse.ArgumentParser) -> dict:
    for a in parser._actions:  # argparse keeps no public accessor
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def unknown_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """One line per ``--option`` in ``argv`` the chosen subcommand does not define (unique
    prefixes excepted), naming the closest defined options."""
    subs = _subparsers(parser)
    cmd = next((t for t in argv if not t.startswith("-")), None)
    if cmd is not None and cmd not in subs:
        return []  # a misspelled command: argparse's "invalid choice" names it
    target = subs.get(cmd) if cmd in subs else None
    scope = parser if target is None else target
    known = [o for a in scope._actions for o in a.option_strings]
    if target is not None:
        known += [o for a in parser._actions for o in a.option_strings]
    known = list(dict.fromkeys(known))  # --help / -h are both the parser's and the command's
    hidden = {o for a in scope._actions if a.help == argparse.SUPPRESS for o in a.option_strings}  # deprecated
    out = []
    seen_cmd = target is None
    for t in argv:
        if t == "--":
            break
        if not seen_cmd:
            seen_cmd = t == cmd
            continue
        if not t.startswith("--"):
            continue
        opt = t.split("=", 1)[0]
        if opt in known or sum(1 for k in known if k.startswith(opt)) == 1:
            continue
        near = difflib.get_close_matches(opt, known, n=2, cutoff=0.6)
        out.append(
            f"unknown option {opt}"
            + (
                f" (did you mean {' or '.join(near)}?)"
                if near
                else f"; {cmd} takes: {', '.join(sorted(set(known) - hidden))}"
            )
        )
    return out


class _OneLineErrors(argparse.ArgumentParser):
    """Usage errors as one line, ``int8conf CMD: error: ...``, exit 2 (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser with every command module's subcommands registered."""
    parser = _OneLineErrors(
        prog="int8conf", description="Fault-injection conformance framework for INT8 (W8A8) GEMM kernels."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "options":  # options: shared by the commands, not one
            continue
        try:
            reg = getattr(importlib.import_module(f"{commands.__name__}.{info.name}"), "register", None)
            if reg is not None:  # options: shared pieces, no command
                reg(sub)
        except Exception as e:  # noqa: BLE001 -- keep the other commands usable
            line = first_line(e, None)
            print(
                f"int8conf: warning: command module {info.name!r} not loaded: {type(e).__name__}: {line}",
                file=sys.stderr,
            )
    for sp in [parser, *_subparsers(parser).values()]:
        sp.formatter_class = plain_help_formatter(sp.formatter_class)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``int8conf`` console script; returns the exit code."""
    silence_import_noise()
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    bad = unknown_options(parser, argv)
    if bad:  # argparse's own error path: usage, "int8conf CMD: error: ...", SystemExit(2)
        cmd = next((t for t in argv if not t.startswith("-")), None)
        _subparsers(parser).get(cmd, parser).error("; ".join(bad))
    cwd_on_sys_path()
    args = parser.parse_args(argv)
    sigterm_as_interrupt()  # a CI time limit stops a long command like Ctrl-C: partial reports
    record_interrupts()  # a KeyboardInterrupt a kernel raises itself is its failure, a Ctrl-C a stop
    try:
        return int(args.func(args) or 0)
    except Int8confError as e:
        line = first_line(e, None) or type(e).__name__
        print(f"int8conf: error: {line}", file=sys.stderr)
        return 2
    except OSError as e:  # a report / output path the user gave is unusable
        print(f"int8conf: error: {_os_error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("int8conf: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 -- int8conf's own bug: its traceback and exit 4, never "not conformant" (1)
        traceback.print_exc()
        print(
            "int8conf: internal error (int8conf's own bug: please report it with the traceback above)", file=sys.stderr
        )
        return exit_codes.INTERNAL
    finally:
        restore_sigterm()
        restore_interrupts()


if __name__ == "__main__":
    sys.exit(main())
