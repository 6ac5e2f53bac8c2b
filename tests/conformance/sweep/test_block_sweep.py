"""The block-scaled kernel's sweep: its fault set (faults.catalogue.faults_for(..., "block")), its cells over block-quantized
captures, its matrix (predictions/v1.3-block.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conformance.checks.result import Verdict
from conformance.kernels.registry import get_kernel
from conformance.suite.signatures import EXPLANATION_KEY, sampled_rows
from conformance.sweep.cells import SCALE_MODES_FOR, SweepSpec, kernel_cells, layer_cells
from conformance.sweep.runner import SweepTask, run_unit
from conformance.sweep.scoring import signature_hits
from faults.catalogue import faults_for, not_applicable
from predictions.matrix import matrix_domain, parse_matrix
from reference.model.capture import default_capture_set

PRED = Path(__file__).resolve().parents[3] / "predictions"


def test_block_kernels_sweep_in_the_block_domain_without_f6_f7():
    assert matrix_domain(get_kernel("block-cpu")) == matrix_domain(get_kernel("block-fp8-cpu")) == "block"
    assert matrix_domain(get_kernel("cpu")) == "int8" and matrix_domain(get_kernel("fp8-cpu")) == "e4m3"
    for operands in ("int8", "e4m3"):
        ids = [f.id for f in faults_for(operands, "block")]
        assert "F6" not in ids and "F7" not in ids and ("F10" in ids) == (operands == "e4m3")
        for fid in ("F6", "F7"):
            assert not_applicable(fid, operands, "block")
    assert not_applicable("F10", "int8", "block") and not_applicable("F4", "int8", "block") is None
    cells = layer_cells(["L"], ["F8"], ["all"], list(SCALE_MODES_FOR["block"]), [0], "block")
    assert [c.scale_mode for c in cells] == ["group", "group_ue8m0"]


def test_a_null_fault_block_slice_passes_c8_and_c5_on_ue8m0_scales():
    cs = default_capture_set()
    if cs is None:
        pytest.skip("no shipped capture set")
    layer = cs.layer_names()[3]  # o_proj: K 384, N 384
    spec = SweepSpec("block-cpu", "", str(cs.dir), "", str(cs.model_dir), {}, model_checks=False)
    out = {}
    for c in layer_cells([layer], ["F8"], ["all"], list(SCALE_MODES_FOR["block"]), [0], "block"):
        (rows,) = run_unit((SweepTask(c, spec),))
        out[c.scale_mode] = {r["check_id"]: r["verdict"] for r in rows.rows}
    assert out["group"]["C8"] == out["group_ue8m0"]["C8"] == Verdict.PASS
    assert out["group"]["C5"] == Verdict.NOT_APPLICABLE and out["group_ue8m0"]["C5"] == Verdict.PASS
    assert {out[m][c] for m in out for c in ("C3", "C4", "C6")} == {Verdict.NOT_APPLICABLE}
    (kc,) = kernel_cells(["F8"], ["all"], [0])
    (krows,) = run_unit((SweepTask(kc, spec),))
    assert [(r["scale_mode"], r["check_id"], r["verdict"]) for r in krows.rows] == [
        ("group", "C16", Verdict.PASS),
        ("group_ue8m0", "C16", Verdict.PASS),
    ]


def test_the_block_matrix_predicts_every_block_fault_and_changes_nothing_of_v12():
    p, parent = PRED / "v1.3-block.yaml", PRED / "v1.2-fp8.yaml"
    m = parse_matrix(p, p.read_bytes())
    assert m.operands == "block" and m.amends["file"] == "v1.2-fp8.yaml" and m.changes == []
    assert m.amends["sha256"] == parse_matrix(parent, parent.read_bytes()).sha256
    for fid in ("F12", "F13", "F14"):  # K % 128 == 0 and bn == bk on every bundled layer: no bit changes
        assert {c.prediction for mode in m.scale_modes for c in m.rows[f"{fid}@{mode}"].values()} <= {"silent", "n/a"}
    assert all(m.predict("F8", c, mode) != "fire" for c in m.checks for mode in m.scale_modes)


def test_a_block_f11_cell_stores_its_emulation_test_and_its_signature_names_f11():
    cs = default_capture_set()
    if cs is None:
        pytest.skip("no shipped capture set")
    layer = cs.layer_names()[3]  # o_proj: M 64, K 384, N 384
    spec = SweepSpec("block-cpu", "", str(cs.dir), "", str(cs.model_dir), {}, model_checks=False)
    (cell,) = layer_cells([layer], ["F11"], ["all"], ["group"], [0], "block")
    (res,) = run_unit((SweepTask(cell, spec),))
    (c8,) = [r for r in res.rows if r["check_id"] == "C8"]
    ex = c8["evidence"][EXPLANATION_KEY]
    # the differing elements of 16 of the 64 rows are tested, out of the ground truth's changed elements
    assert ex["sampled_from"] == res.ground_truth["changed"] == 24381 and ex["n_differ"] == 6088
    assert list(ex["explained"]) == ["F1", "F2", "F3", "F4", "F5", "F11", "F12", "F13", "F14"]
    assert ex["explained"]["F11"] == 6088 and max(k for f, k in ex["explained"].items() if f != "F11") == 24
    key = dict(layer=cell.layer, fault=cell.fault, coverage=cell.coverage, seed=cell.seed)
    stored = [dict(r, **key, ground_truth=res.ground_truth) for r in res.rows]
    (hit,) = signature_hits(stored).to_dict("records")
    assert (hit["matched"], hit["hit"], hit["n_matched"]) == ("F11", True, 1)
    # without the stored test the per-token predicates name nothing for this cell
    del c8["evidence"][EXPLANATION_KEY]
    (miss,) = signature_hits(stored).to_dict("records")
    assert (miss["matched"], miss["hit"]) == ("", False)


def test_sampled_rows_spreads_evenly_over_the_rows_holding_a_difference():
    holding = torch.tensor([False, True, True, False, True, True, True])
    assert sampled_rows(holding, 3).tolist() == [1, 4, 6]
    assert sampled_rows(holding, 1).tolist() == [1]
    assert sampled_rows(holding, 9).tolist() == [1, 2, 4, 5, 6]
