"""``int8conf predictions``: lock, verify and show pre-registered prediction
matrices (DESIGN.md section 7, package ``predictions``).

* ``int8conf predictions lock FILE``: append FILE's SHA-256 to its directory's
  LOCK (once, when the matrix is created; an amendment is checked against the
  matrix it amends first).
* ``int8conf predictions verify [FILE ...]``: prove every locked matrix (or
  the given ones) matches its lock, every amendment lists exactly its
  changes, and (inside git) that history never rewrote the LOCK or a locked
  matrix. Exit 0 verified, 2 refused (one line).
* ``int8conf predictions show FILE``: print the matrix as a table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from reference.command_line import make_console


def register(subparsers) -> None:
    """Add the ``predictions`` subcommand."""
    p = subparsers.add_parser(
        "predictions",
        help="lock / verify / show pre-registered prediction matrices",
        description="Pre-registered prediction matrices (predictions/*.yaml) and their LOCK.",
    )
    sub = p.add_subparsers(dest="action", required=True)
    lk = sub.add_parser("lock", help="lock a new matrix (append its SHA-256 to LOCK)")
    lk.add_argument("file")
    vf = sub.add_parser("verify", help="verify matrices against LOCK and git history")
    vf.add_argument("files", nargs="*", help="matrices (default: every locked one)")
    vf.add_argument("--dir", default=None, help="predictions directory (default: the package's)")
    sh = sub.add_parser("show", help="print a verified matrix")
    sh.add_argument("file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Dispatch the action; PredictionError propagates (CLI prints one line, exit 2)."""
    from predictions.lock import default_dir, lock_matrix, read_lock, verify_git_history, verify_matrix

    if args.action == "lock":
        e = lock_matrix(args.file)
        print(f"locked {e.file}: sha256 {e.sha256}")
        return 0
    if args.action == "verify":
        d = Path(args.dir) if args.dir else default_dir()
        files = [Path(f) for f in args.files] or [d / e.file for e in read_lock(d)]
        for f in files:
            m = verify_matrix(f)
            amends = f" (amends {m.amends['file']})" if m.amends else ""
            print(
                f"verified {f.name}: {m.n_core_cells()} core cells + {len(m.extra_checks)} extra "
                f"columns, sha256 {m.sha256[:16]}...{amends}"
            )
        hist = verify_git_history(d if not args.files else files[0].parent)
        if hist is None:
            print("git history: not a git work tree (not checked)")
        else:
            print(
                f"git history: LOCK append-only over {hist['lock_commits']} commits; "
                f"locked matrices never changed since the commit that locked them"
            )
        return 0
    m = verify_matrix(args.file)
    t = Table(title=f"{Path(args.file).name} ({m.sha256[:16]}...)")
    t.add_column("row")
    for c in m.checks:
        t.add_column(c, no_wrap=True, min_width=6)
    for key, row in m.rows.items():
        t.add_row(key, *[row[c].prediction for c in m.checks])
    make_console().print(t)
    return 0
