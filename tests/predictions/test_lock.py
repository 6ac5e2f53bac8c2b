"""Pre-registration enforced by code: locks, amendments, git history."""

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from predictions.lock import lock_matrix, matrix_chain, read_lock, verify_git_history, verify_matrix
from predictions.matrix import parse_matrix
from reference.errors import PredictionError

PRED = Path(__file__).resolve().parents[2] / "predictions"


def _v1(tmp: Path) -> Path:
    """A fresh copy of v1.yaml, locked in ``tmp``."""
    p = tmp / "v1.yaml"
    shutil.copy(PRED / "v1.yaml", p)
    lock_matrix(p)
    return p


def _amend(tmp: Path, parent: Path, name: str, row: str, check: str, to: str, list_change: bool = True) -> Path:
    """An amendment of ``parent`` changing one cell (optionally without listing it)."""
    doc = yaml.safe_load(parent.read_text())
    was = doc["rows"][row][check]["prediction"]
    doc["matrix"] = name[:-5]
    doc["amends"] = {"file": parent.name, "sha256": hashlib.sha256(parent.read_bytes()).hexdigest()}
    doc["rows"][row][check] = {"prediction": to, "rationale": "changed after the pilot"}
    doc["changes"] = (
        [{"row": row, "check": check, "from": was, "to": to, "reason": "pilot showed it"}] if list_change else []
    )
    p = tmp / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def test_committed_v1_matches_its_lock_and_has_63_core_cells_plus_c8_and_e1():
    m = verify_matrix(PRED / "v1.yaml")
    assert m.n_core_cells() == 63
    assert m.extra_checks == ("C8", "E1")
    assert read_lock(PRED)[0].file == "v1.yaml"
    assert read_lock(PRED)[0].sha256 == hashlib.sha256((PRED / "v1.yaml").read_bytes()).hexdigest()
    # the null fault is predicted silent everywhere
    assert {c.prediction for c in m.rows["F8"].values()} == {"silent"}


def test_every_committed_matrix_verifies_and_history_is_append_only():
    for e in read_lock(PRED):
        verify_matrix(PRED / e.file)
    verify_git_history(PRED)  # None outside git; raises on a rewritten LOCK


def test_tampered_matrix_is_refused_with_one_line(tmp_path):
    p = _v1(tmp_path)
    p.write_text(p.read_text().replace('F4:\n    C1: {prediction: "silent"', 'F4:\n    C1: {prediction: "fire"', 1))
    with pytest.raises(PredictionError, match="does not match its lock") as e:
        verify_matrix(p)
    assert "\n" not in str(e.value)


def test_amendment_verifies_and_its_chain_is_oldest_first(tmp_path):
    p = _v1(tmp_path)
    a = _amend(tmp_path, p, "v1.1.yaml", "F3", "C8", "silent")
    lock_matrix(a)
    chain = matrix_chain(a)
    assert [m.id for m in chain] == ["v1", "v1.1"]
    assert chain[1].predict("F3", "C8", "own") == "silent"
    assert chain[0].predict("F3", "C8", "own") == "fire"


def test_edited_earlier_matrix_is_refused_even_when_relocked(tmp_path):
    p = _v1(tmp_path)
    a = _amend(tmp_path, p, "v1.1.yaml", "F3", "C8", "silent")
    lock_matrix(a)
    # edit v1 instead of amending, and rebuild the whole LOCK around the edit
    p.write_text(p.read_text().replace('F4:\n    C1: {prediction: "silent"', 'F4:\n    C1: {prediction: "fire"', 1))
    (tmp_path / "LOCK").unlink()
    lock_matrix(p)
    (tmp_path / "LOCK").write_text((tmp_path / "LOCK").read_text())
    with pytest.raises(PredictionError, match="earlier matrix was edited instead of amended"):
        lock_matrix(a)
    with pytest.raises(PredictionError, match="not locked|earlier matrix was edited"):
        verify_matrix(a)


def test_edited_earlier_amendment_is_refused(tmp_path):
    p = _v1(tmp_path)
    a = _amend(tmp_path, p, "v1.1.yaml", "F3", "C8", "silent")
    lock_matrix(a)
    b = _amend(tmp_path, a, "v1.2.yaml", "F5", "C8", "silent")
    lock_matrix(b)
    a.write_text(a.read_text().replace("pilot showed it", "pilot showed it again"))
    with pytest.raises(PredictionError, match="v1.1.yaml"):
        verify_matrix(b)


def test_rewritten_lock_line_breaks_the_chain(tmp_path):
    p = _v1(tmp_path)
    a = _amend(tmp_path, p, "v1.1.yaml", "F3", "C8", "silent")
    lock_matrix(a)
    lines = (tmp_path / "LOCK").read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if "v1.yaml" in x)
    lines[i] = "0" * 64 + lines[i][64:]
    (tmp_path / "LOCK").write_text("\n".join(lines) + "\n")
    with pytest.raises(PredictionError, match="chain broken"):
        read_lock(tmp_path)


def test_unlisted_change_and_relock_are_refused(tmp_path):
    p = _v1(tmp_path)
    a = _amend(tmp_path, p, "v1.1.yaml", "F3", "C8", "silent", list_change=False)
    with pytest.raises(PredictionError, match="without a listed reason"):
        lock_matrix(a)
    with pytest.raises(PredictionError, match="already locked"):
        lock_matrix(p)


def test_yaml_tags_are_not_constructed():
    evil = b"matrix: !!python/object/apply:os.system ['echo pwned']\n"
    with pytest.raises(PredictionError, match="not valid YAML"):
        parse_matrix(Path("evil.yaml"), evil)


def _git_repo(tmp_path: Path) -> tuple[list, Path]:
    """``(git command prefix, predictions dir)`` of a fresh repository in ``tmp_path`` (skips without git)."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    g = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(g[:3] + ["init", "-q"], check=True)
    d = tmp_path / "predictions"
    d.mkdir()
    return g, d


def test_git_history_refuses_a_rewritten_lock(tmp_path):
    g, d = _git_repo(tmp_path)
    _v1(d)
    subprocess.run(g + ["add", "."], check=True)
    subprocess.run(g + ["commit", "-qm", "v1"], check=True)
    assert verify_git_history(d)["lock_commits"] == 1
    lock = d / "LOCK"
    lock.write_text(lock.read_text().replace("v1.yaml", "v1.yaml ", 1))
    subprocess.run(g + ["commit", "-qam", "rewrite"], check=True)
    with pytest.raises(PredictionError, match="append-only"):
        verify_git_history(d)


def test_git_history_takes_drafts_before_the_lock_and_refuses_edits_after(tmp_path):
    g, d = _git_repo(tmp_path)
    p = d / "v1.yaml"
    text = (PRED / "v1.yaml").read_text()
    p.write_text(text + "# draft\n")
    subprocess.run(g + ["add", "."], check=True)
    subprocess.run(g + ["commit", "-qm", "draft"], check=True)
    p.write_text(text)  # the draft edited before it is locked: no prediction yet
    lock_matrix(p)
    subprocess.run(g + ["add", "."], check=True)
    subprocess.run(g + ["commit", "-qm", "lock"], check=True)
    head = subprocess.run(g[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert verify_git_history(d) == {"lock_commits": 1, "matrices": {"v1.yaml": head}}
    p.write_text(text + "# edited after the lock\n")
    subprocess.run(g + ["commit", "-qam", "edit"], check=True)
    with pytest.raises(PredictionError, match=f"changed after the commit that locked it \\({head[:10]}; 2 versions"):
        verify_git_history(d)
