"""Prediction matrices for FP8 (e4m3) kernels: their domain (faults, checks, scale modes), an e4m3 matrix amending an
int8 one changes none of its cells, and the newest matrix is chosen per operand dtype."""

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from predictions.lock import latest_locked, lock_matrix, matrix_chain, read_lock, verify_git_history, verify_matrix
from predictions.matrix import DOMAINS, parse_matrix
from reference.errors import PredictionError

PRED = Path(__file__).resolve().parents[2] / "predictions"


def _doc(parent: Path) -> dict:
    """An e4m3 matrix amending ``parent``: every applicable cell silent, F6 / F7 n/a."""
    dom = DOMAINS["e4m3"]
    checks = dom.core_checks + dom.extra_checks
    rows = {f"F{i}": {c: {"prediction": "silent", "rationale": "a reason"} for c in checks} for i in range(1, 11)}
    for fid in ("F6", "F7"):
        rows[fid] = {c: {"prediction": "n/a", "rationale": "does not apply to e4m3"} for c in checks}
    return {
        "matrix": "fp8",
        "operands": "e4m3",
        "amends": {"file": parent.name, "sha256": hashlib.sha256(parent.read_bytes()).hexdigest()},
        "core_checks": list(dom.core_checks),
        "extra_checks": list(dom.extra_checks),
        "rows": rows,
    }


def _write(tmp: Path, doc: dict, name: str = "fp8.yaml") -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


@pytest.fixture
def v11(tmp_path) -> Path:
    """Copies of the committed v1 and v1.1, locked in ``tmp_path``."""
    for name in ("v1.yaml", "v1.1.yaml"):
        shutil.copy(PRED / name, tmp_path / name)
        lock_matrix(tmp_path / name)
    return tmp_path / "v1.1.yaml"


def test_an_e4m3_matrix_amends_an_int8_one_and_is_chosen_for_e4m3_kernels(tmp_path, v11):
    p = _write(tmp_path, _doc(v11))
    lock_matrix(p)
    m = verify_matrix(p)
    assert m.operands == "e4m3" and m.scale_modes == ("per_token", "per_tensor") and m.changes == []
    assert m.checks == ("C1", "C2", "C3", "C4", "C5", "C6", "C8", "C11", "C12") and m.n_core_cells() == 60
    assert m.predict("F10", "C11", "per_tensor") == "silent" and m.predict("F6", "C8", "per_token") == "n/a"
    assert [x.id for x in matrix_chain(p)] == ["v1", "v1.1", "fp8"]
    assert latest_locked("int8", tmp_path) == v11 and latest_locked("e4m3", tmp_path) == p
    assert [e.file for e in read_lock(tmp_path)] == ["v1.yaml", "v1.1.yaml", "fp8.yaml"]


def test_no_matrix_for_e4m3_kernels_is_one_line(v11):
    with pytest.raises(PredictionError, match="no locked prediction matrix for e4m3 kernels"):
        latest_locked("e4m3", v11.parent)


def _refused(tmp: Path, doc: dict, match: str) -> None:
    p = _write(tmp, doc)
    with pytest.raises(PredictionError, match=match) as e:
        parse_matrix(p, p.read_bytes())
    assert "\n" not in str(e.value)


def test_an_e4m3_matrix_outside_its_domain_is_refused(tmp_path, v11):
    doc = _doc(v11)
    del doc["rows"]["F10"]
    _refused(tmp_path, doc, "fault F10 needs row F10 or all of F10@per_token, F10@per_tensor")
    doc = _doc(v11)
    doc["rows"]["F6"]["C8"]["prediction"] = "fire"
    _refused(tmp_path, doc, "fault F6 does not apply to e4m3 kernels: every cell of its row is n/a")
    doc = _doc(v11)
    doc["rows"]["F1@own"] = doc["rows"].pop("F1")
    _refused(tmp_path, doc, "row 'F1@own' is not F<n> or F<n>@per_token / F<n>@per_tensor")
    doc = _doc(v11)
    doc["core_checks"] = doc["core_checks"] + ["C7"]
    _refused(tmp_path, doc, r"core_checks must be \['C1', 'C2', 'C3', 'C4', 'C5', 'C6'\]")
    doc = _doc(v11)
    doc["extra_checks"] = ["C8", "E1"]
    _refused(tmp_path, doc, "extra_checks must be among")
    doc = _doc(v11)
    doc["operands"] = "fp4"
    _refused(tmp_path, doc, "operands must be one of")


def test_an_int8_matrix_takes_no_f10_prediction(tmp_path):
    doc = yaml.safe_load((PRED / "v1.yaml").read_text())
    doc["rows"]["F10"] = {c: {"prediction": "fire", "rationale": "x"} for c in doc["rows"]["F1"]}
    _refused(tmp_path, doc, "fault F10 does not apply to int8 kernels")
    doc["rows"]["F10"] = {c: {"prediction": "n/a", "rationale": "does not apply"} for c in doc["rows"]["F1"]}
    p = _write(tmp_path, doc, "v1.yaml")
    assert parse_matrix(p, p.read_bytes()).operands == "int8"


def test_an_e4m3_amendment_of_an_int8_matrix_lists_no_changes(tmp_path, v11):
    doc = _doc(v11)
    doc["changes"] = [{"row": "F1", "check": "C8", "from": "fire", "to": "silent", "reason": "r"}]
    p = _write(tmp_path, doc)
    with pytest.raises(PredictionError, match="changes none of its cells, so it lists no changes"):
        lock_matrix(p)


def test_an_e4m3_amendment_of_an_e4m3_matrix_lists_its_changes(tmp_path, v11):
    first = _write(tmp_path, _doc(v11))
    lock_matrix(first)
    doc = _doc(first)
    doc["matrix"] = "fp8.1"
    doc["rows"]["F10"]["C11"]["prediction"] = "fire"
    p = _write(tmp_path, doc, "fp8.1.yaml")
    with pytest.raises(PredictionError, match="cell F10 C11 changed silent -> fire without a listed reason"):
        lock_matrix(p)
    doc["changes"] = [{"row": "F10", "check": "C11", "from": "silent", "to": "fire", "reason": "C11 measures it"}]
    p = _write(tmp_path, doc, "fp8.1.yaml")
    lock_matrix(p)
    assert verify_matrix(p).predict("F10", "C11", "per_token") == "fire"
    assert latest_locked("e4m3", tmp_path) == p


def test_the_committed_fp8_amendment_verifies_and_precedes_every_fp8_sweep_result():
    m = verify_matrix(PRED / "v1.2-fp8.yaml")
    assert m.operands == "e4m3" and m.changes == [] and m.amends["file"] == "v1.1.yaml"
    assert m.amends["sha256"] == hashlib.sha256((PRED / "v1.1.yaml").read_bytes()).hexdigest()
    assert list(m.rows) == [f"F{i}" for i in range(1, 11)] and m.checks[-2:] == ("C11", "C12")
    for fid in ("F6", "F7"):
        assert {c.prediction for c in m.rows[fid].values()} == {"n/a"}
    assert {m.predict("F8", c, "per_token") for c in m.checks} == {"silent", "n/a"}
    assert m.predict("F10", "C11", "per_tensor") == "fire" and m.predict("F3", "C8", "per_token") == "silent"
    assert all(c.rationale and "\n" not in c.rationale for row in m.rows.values() for c in row.values())
    assert latest_locked("e4m3") == PRED / "v1.2-fp8.yaml" and latest_locked("int8") == PRED / "v1.1.yaml"


@pytest.mark.parametrize(
    "matrix, results",
    [
        ("v1.2-fp8.yaml", "reports/sweep/fp8-cpu"),
        ("v1.3-block.yaml", "reports/sweep/block-cpu"),
        ("v1.3-block.yaml", "reports/sweep/block-fp8-cpu"),
    ],
)
def test_an_amendment_is_locked_before_every_commit_of_its_sweep_results(matrix, results):
    hist = verify_git_history(PRED)
    if hist is None:
        pytest.skip("not a git work tree")
    # git history proves the order: the commit that locked the amendment is an ancestor of every commit that
    # touched its sweep's results
    root = PRED.parent
    locked = hist["matrices"][matrix]
    log = subprocess.run(["git", "-C", str(root), "log", "--format=%H", "--", results], capture_output=True, text=True)
    assert log.stdout.split(), f"no commit of {results}"
    for c in log.stdout.split():
        anc = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", locked, c])
        assert anc.returncode == 0 and c != locked, c
