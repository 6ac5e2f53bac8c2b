"""``reference.fileio.portable_path`` / ``portable_text`` / ``portable_paths``:
how paths are recorded in committed reports (no machine-specific absolute
path)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from reference.fileio import REPO_ROOT, env_prefix, portable_path, portable_paths, portable_text


def _tmp() -> str:
    """How reports name the temporary directory here: ``$TMPDIR``, or ``${TMPDIR:-/tmp}`` while it is unset."""
    return env_prefix("TMPDIR", tempfile.gettempdir())


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """A private cache and home so the test does not depend on this machine's."""
    cache, home = tmp_path / "cache", tmp_path / "home"
    monkeypatch.setenv("INT8CONF_CACHE", str(cache))
    monkeypatch.setenv("HOME", str(home))
    return cache, home


def test_paths_under_each_known_root(roots):
    cache, home = roots
    assert portable_path(REPO_ROOT / "reference" / "model" / "assets" / "captures") == "reference/model/assets/captures"
    assert portable_path(REPO_ROOT) == "."
    assert portable_path(cache / "captures" / "f29ff7f2") == "$INT8CONF_CACHE/captures/f29ff7f2"
    assert portable_path(home / "out" / "triton") == "~/out/triton"
    # the cache lies inside the temporary directory: the longer root wins
    tmp_rel = Path(os.path.relpath(os.path.realpath(cache.parent), os.path.realpath(tempfile.gettempdir())))
    assert portable_path(cache.parent / "x") == f"{_tmp()}/{tmp_rel.as_posix()}/x"


def test_other_paths(roots):
    assert portable_path("/data/models/qwen3-1.7b") == ".../qwen3-1.7b"
    assert portable_path("/data/models/qwen3-1.7b/") == ".../qwen3-1.7b"
    assert portable_path("reports/triton") == "reports/triton"  # relative: unchanged
    assert portable_path("") == "" and portable_path(None) is None


def test_text_rewrites_known_roots_only_at_path_boundaries(roots):
    cache, _ = roots
    r = str(REPO_ROOT)
    text = (
        f"28 layers from {r}/reference/model/assets/captures; gate failed: "
        f"{cache}/checkpoints/81e4/own: tensor 'w' element [0, 18]; cwd {r}; "
        f"sibling {r}-old/x; /data/x stays"
    )
    # "<repo>-old" is not inside the repository: it keeps its path, or takes the
    # temporary directory's root when the checkout itself lies there (a CI clone in /tmp)
    sib = os.path.realpath(f"{r}-old/x")
    tmp = os.path.realpath(tempfile.gettempdir())
    sibling = f"{_tmp()}/{os.path.relpath(sib, tmp)}" if sib.startswith(tmp + os.sep) else f"{r}-old/x"
    assert portable_text(text) == (
        "28 layers from reference/model/assets/captures; gate failed: "
        "$INT8CONF_CACHE/checkpoints/81e4/own: tensor 'w' element [0, 18]; cwd .; "
        f"sibling {sibling}; /data/x stays"
    )
    assert portable_text(portable_text(text)) == portable_text(text)  # made portable once: unchanged
    tmp_pre = env_prefix("TMPDIR", tempfile.gettempdir())
    once = portable_text(f"--model {tempfile.gettempdir()}/big")
    assert once == f"--model {tmp_pre}/big" and portable_text(once) == once


def test_documents_keep_structure_and_non_paths(roots):
    cache, _ = roots
    doc = {
        "captures": {"source": str(REPO_ROOT / "caps"), "available": True, "n": 3},
        "cases": [{"meta": {"capture_dir": str(cache / "c"), "source": "capture"}}],
        "note": f"int8conf sweep --model /data/big --out {cache}/out",
        "ratio": 1.5,
        "nothing": None,
        "label": "GMAC/s",
    }
    assert portable_paths(doc) == {
        "captures": {"source": "caps", "available": True, "n": 3},
        "cases": [{"meta": {"capture_dir": "$INT8CONF_CACHE/c", "source": "capture"}}],
        "note": "int8conf sweep --model /data/big --out $INT8CONF_CACHE/out",
        "ratio": 1.5,
        "nothing": None,
        "label": "GMAC/s",
    }


def test_a_variable_that_is_unset_is_named_with_its_default(monkeypatch, tmp_path):
    """A report's "Produced by" line pastes into a shell where TMPDIR is unset (issue 42 item 9)."""
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    tmp = tempfile.gettempdir()
    assert portable_path(os.path.join(tmp, "int8conf-x", "r")) == f"${{TMPDIR:-{tmp}}}/int8conf-x/r"
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert portable_path(tmp_path / "r") == "$TMPDIR/r"


def test_a_path_through_a_symlink_is_shown_as_written(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "p.yaml").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    roots = [(r, "") for r in dict.fromkeys((os.path.realpath(tmp_path), os.path.abspath(tmp_path)))]
    assert portable_path(str(tmp_path / "link" / "p.yaml"), roots) == "link/p.yaml"
    assert portable_path(str(tmp_path / "real" / "p.yaml"), roots) == "real/p.yaml"
