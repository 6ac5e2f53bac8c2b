"""The sweep on an FP8 (e4m3) kernel: a slice runs and is scored against the locked FP8 amendment, faults that do not
apply are refused, and each committed scorecard (int8, FP8, block) is still what its committed store scores to."""

import json
import shutil
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.sweep import scorecard
from conformance.sweep.store import SweepStore
from predictions.lock import latest_locked, matrix_chain

ROOT = Path(__file__).resolve().parents[3]


def _captures():
    from reference.model.capture import default_capture_set

    if default_capture_set() is None:
        pytest.skip("default captures not built")


def test_an_fp8_sweep_slice_runs_and_is_scored_against_the_fp8_amendment(tmp_path):
    _captures()
    argv = ["sweep", "--kernel", "fp8-cpu", "--linears", "1", "--inject", "F1,F4,F8,F9,F10", "--coverages", "all"]
    assert main(argv + ["--workers", "1", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / "fp8-cpu"
    sc = json.loads((out / "scorecard.json").read_text())
    assert list(sc["matrices"]) == ["v1.2-fp8"] and sc["meta"]["operands"] == "e4m3"
    m = sc["meta"]
    assert (m["layer_cells"], m["model_cells"], m["scale_modes"]) == (10, 5, 2)  # 5 kernel cells (C11)
    with SweepStore(out / "sweep.sqlite") as st:
        rows = st.rows()
    seen = {(r["layer"], r["fault"], r["scale_mode"], r["check_id"]): r["verdict"] for r in rows}
    layer = "model.layers.0.self_attn.k_proj"
    per_case = {"C1", "C2", "C3", "C4", "C5", "C6", "C8", "C12"}
    assert {c for (lay, _, _, c) in seen if lay == layer} == per_case
    assert {c for (lay, _, _, c) in seen if lay == "*kernel*"} == {"C11"}
    for mode in ("per_token", "per_tensor"):
        fired = {
            f: {c for (lay, ff, sm, c), v in seen.items() if ff == f and sm == mode and v == "fail"}
            for f in ("F1", "F4", "F8", "F9", "F10")
        }
        assert fired["F8"] == set()
        assert fired["F4"] == {"C8", "C12"}
        assert fired["F9"] == {"C2", "C6", "C8", "C12"}
        assert fired["F10"] == {"C6", "C8", "C11", "C12"}
        assert {seen[(layer, "F8", mode, c)] for c in ("C3", "C5")} == {"n/a"}
        assert seen[(layer, "F8", mode, "C4")] == "pass"
    t = sc["totals"]["v1.2-fp8"]["all"]
    assert t["FP"] == 0 and t["unexpected_applicable"] == 0
    md = (out / "scorecard.md").read_text()
    assert "+ 5 kernel cells (C11)" in md and "against v1.2-fp8, C1-C6 + C8, C11, C12:" in md


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--inject", "F6"], "--inject F6: int32_overflow does not apply to e4m3 kernels"),
        (["--scale-modes", "own"], "unknown scale mode(s) ['own'] for e4m3 kernels"),
    ],
)
def test_an_fp8_sweep_refuses_what_does_not_apply_in_one_line(tmp_path, capsys, extra, message):
    _captures()
    argv = ["sweep", "--kernel", "fp8-cpu", "--linears", "1", "--coverages", "one", "--quiet", "--out", str(tmp_path)]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "kernel, domain, matrices",
    [
        ("cpu", "int8", ["v1", "v1.1"]),
        ("fp8-cpu", "e4m3", ["v1.2-fp8"]),
        ("block-cpu", "block", ["v1.3-block"]),
        ("block-fp8-cpu", "block", ["v1.3-block"]),
    ],
)
def test_each_committed_scorecard_is_what_its_committed_store_scores_to(tmp_path, kernel, domain, matrices):
    """Each committed store scores, against the matrices of its domain in the newest locked chain (int8: v1 and its
    amendment v1.1; the FP8 and block amendments alone), to its committed scorecard byte for byte: the later
    amendments, their scoring paths and faults change nothing of an earlier sweep."""
    src = ROOT / "reports" / "sweep" / kernel
    shutil.copy(src / "sweep.sqlite", tmp_path / "sweep.sqlite")
    with SweepStore(tmp_path / "sweep.sqlite") as st:
        rows = st.rows()
    chain = [m for m in matrix_chain(latest_locked(domain)) if m.operands == domain]
    assert [m.id for m in chain] == matrices
    committed = json.loads((src / "scorecard.json").read_text())
    scorecard.write(scorecard.build(rows, {m.id: m for m in chain}, committed["meta"]), tmp_path / "out")
    for name in ("scorecard.json", "scorecard.csv", "mismatches.csv", "scorecard.md"):
        assert (tmp_path / "out" / name).read_bytes() == (src / name).read_bytes(), name
