"""Assertion shared by the tests of every report producer: a written report
names no absolute path of the machine that wrote it."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from reference.fileio import REPO_ROOT

#: an absolute path under a typical machine root, not preceded by a portable
#: prefix character ($TMPDIR/..., ~/..., .../name)
_ENV_DEFAULT = re.compile(r"\$\{(\w+):-[^}]*\}")
_ABS = re.compile(r"(?<![\w$~.])/(?:work|tmp|root|home|Users|var|private)/")


def machine_paths(text: str, *extra) -> list:
    """The machine-specific absolute paths found in ``text`` (empty = clean):
    the repository root, the temporary and home directories, ``extra``
    paths (e.g. pytest's ``tmp_path``), each as written and symlink-resolved,
    and anything that looks like ``/tmp/...``, ``/work/...``, ``/root/...``. A variable's default,
    ``${TMPDIR:-/tmp}`` (``reference.fileio.env_prefix``), is portable: a shell finds the folder anywhere."""
    text = _ENV_DEFAULT.sub(r"$\1", text)
    roots = {str(REPO_ROOT), tempfile.gettempdir(), str(Path.home()), *map(str, extra)}
    roots |= {os.path.realpath(r) for r in roots}
    found = [r for r in roots if r not in ("", os.sep) and r in text]
    return found + _ABS.findall(text)


def absolute_strings(doc) -> list:
    """Every string value of a JSON document that is an absolute path by itself."""
    out = []

    def walk(o):
        if isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
        elif isinstance(o, str) and os.path.isabs(o):
            out.append(o)

    walk(doc if not isinstance(doc, (str, bytes)) else json.loads(doc))
    return out
