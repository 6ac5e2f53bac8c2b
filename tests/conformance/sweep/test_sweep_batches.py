"""Layer batches (one worker call per layer x scale mode, sharing operands,
the clean run and the memoized references) store exactly what cell-by-cell
evaluation stores, and workers reading single layers from the checkpoints
get the operands iter_layer_operands builds."""

import pytest

from conformance.sweep.cells import Cell, SweepSpec, layer_cells
from conformance.sweep.runner import SweepTask, batches, capture_ops, run_layer_batch, run_task, run_unit
from conformance.sweep.store import CellRows, SweepStore

LAYER = "model.layers.0.self_attn.k_proj"  # the smallest captured layer: 64 x 384 x 128


def _specs():
    from reference.model.capture import default_capture_set

    cs = default_capture_set()
    if cs is None:
        pytest.skip("default captures not built")
    plain = SweepSpec("cpu", "digest", str(cs.dir), cs.model_digest, "", {"windows": 1}, model_checks=False)
    dirs = tuple((k, str(cs.checkpoint(k).dir)) for k in ("own", "pow2-nearest"))
    direct = SweepSpec(
        "cpu", "digest", str(cs.dir), cs.model_digest, "", {"windows": 1}, model_checks=False, checkpoint_dirs=dirs
    )
    return plain, direct


def test_direct_layer_reads_give_the_operands_iter_layer_operands_builds():
    plain, direct = _specs()
    for mode in ("own", "pow2"):
        a, b = capture_ops(plain, LAYER, mode), capture_ops(direct, LAYER, mode)
        assert a.digests() == b.digests() and a.meta == b.meta and a.name == b.name
        assert (a.scale_mode, a.out_dtype) == (b.scale_mode, b.out_dtype)


def _key(cr: CellRows):
    return cr.cell, cr.rows, cr.ground_truth, cr.case_digest


def test_a_layer_batch_stores_exactly_what_cell_by_cell_evaluation_stores(tmp_path):
    plain, direct = _specs()
    faults = [f"F{i}" for i in range(1, 10)]
    cells = layer_cells([LAYER], faults, ["1%"], ["own"], [0])
    one_by_one = [run_task(SweepTask(c, plain)) for c in cells]
    batch = run_layer_batch([SweepTask(c, direct) for c in cells])
    assert [_key(x) for x in batch] == [_key(x) for x in one_by_one]
    # not vacuous: F4 moved elements and C8 saw it, F8 moved none and nothing fired
    by = {cr.cell.fault: cr for cr in batch}
    assert by["F4"].ground_truth["changed"] > 0
    assert {r["check_id"]: r["verdict"] for r in by["F4"].rows}["C8"] == "fail"
    assert by["F8"].ground_truth["changed"] == 0
    assert all(r["verdict"] != "fail" for r in by["F8"].rows)
    # units: model cells alone first, then one batch per (layer, scale mode)
    tasks = [
        SweepTask(c, direct)
        for c in layer_cells([LAYER, "model.layers.0.self_attn.v_proj"], ["F8"], ["one"], ["own", "pow2"], [0])
    ]
    models = [SweepTask(Cell.from_key("*model*", f, "one", "both", 0), direct) for f in ("F1", "F2", "F3")]
    units = batches(tasks + models)
    assert units[:3] == [(m,) for m in models] and [len(u) for u in units[3:]] == [1, 1, 1, 1]
    assert batches(tasks + models, model_units=2)[:2] == [(models[0], models[2]), (models[1],)]
    # never more than max_model_cells model cells in one unit (what an interruption can lose)
    many = [
        SweepTask(Cell.from_key("*model*", f, c, "both", 0), direct)
        for f in ("F1", "F2", "F3", "F4")
        for c in ("one", "all")
    ]
    assert [len(u) for u in batches(many, model_units=1)] == [3, 3, 2]
    assert [len(u) for u in batches(many, model_units=1, max_model_cells=8)] == [8]
    units = units[2:]
    assert {(u[0].cell.layer, u[0].cell.scale_mode) for u in units[1:]} == {
        (t.cell.layer, t.cell.scale_mode) for t in tasks
    }
    # a batch is stored in one transaction; a cell already stored is skipped
    with SweepStore(tmp_path / "s.sqlite", {"kernel": "cpu"}) as s:
        assert s.put(batch[0]) is True
        assert s.put_many(batch) == len(batch) - 1
        assert s.put_many(batch) == 0
        assert len(s.done()) == len(batch)
    assert [_key(x) for x in run_unit(tuple(SweepTask(c, direct) for c in cells[:1]))] == [_key(one_by_one[0])]


def _triton_spec():
    """(default capture set, a SweepSpec of ``triton`` reading single layers from its
    own / pow2 checkpoints); skips when the captures are not built."""
    from reference.model.capture import default_capture_set

    cs = default_capture_set()
    if cs is None:
        pytest.skip("default captures not built")
    dirs = tuple((k, str(cs.checkpoint(k).dir)) for k in ("own", "pow2-nearest"))
    return cs, SweepSpec(
        "triton", "digest", str(cs.dir), cs.model_digest, "", {"windows": 1}, model_checks=False, checkpoint_dirs=dirs
    )


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_on_the_gpu_a_layer_batch_with_device_references_stores_what_cpu_references_store():
    # triton natively on the GPU in both arms; the batch keeps operands, exact
    # accumulators, bounds and every reference output on the GPU, the
    # cell-by-cell arm computes them on the CPU: every row must be identical
    cs, spec = _triton_spec()
    for mode in ("own", "pow2"):
        cells = layer_cells([LAYER], [f"F{i}" for i in range(1, 10)], ["1%"], [mode], [0])
        batch = run_layer_batch([SweepTask(c, spec) for c in cells])
        one_by_one = [run_task(SweepTask(c, spec)) for c in cells]
        assert [_key(x) for x in batch] == [_key(x) for x in one_by_one]
        assert {r["check_id"]: r["evidence"].get("max_ulp") for r in batch[3].rows}["C8"] >= 1  # F4


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_on_the_gpu_threads_with_a_stream_each_store_the_serial_rows(tmp_path):
    # triton natively: 4 layers x both scale modes x every fault, serially and in 4 threads
    # (one CUDA stream each, batches of different layers in flight at once): same rows
    from conformance.sweep.distributed import run_cells

    cs, spec = _triton_spec()
    tasks = [
        SweepTask(c, spec, "cuda")
        for c in layer_cells(
            cs.layer_names()[:4], [f"F{i}" for i in range(1, 10)], ["one", "all"], ["own", "pow2"], [0]
        )
    ]
    rows = {}
    for threads in (1, 4):
        with SweepStore(tmp_path / f"t{threads}.sqlite", {"t": 1}) as s:
            st = run_cells(tasks, s, workers=1, threads=threads, quiet=True)
            rows[threads] = s.rows(deterministic_only=True)
        assert st.computed == len(tasks)
    assert st.executor.startswith("threads of this process: 4, one CUDA stream each")
    assert rows[4] == rows[1]


def test_default_workers_four_share_one_gpu_one_per_gpu_on_several_one_per_core_otherwise(monkeypatch):
    import os

    import torch

    from conformance.kernels.registry import get_kernel
    from conformance.sweep.distributed import default_workers

    assert default_workers(get_kernel("cpu")) == (os.cpu_count() or 1, ())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    tri = get_kernel("triton")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert default_workers(tri) == (4, ())  # one GPU: 4 processes share it
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert default_workers(tri) == (2, ())  # never more processes than cores
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert default_workers(tri) == (4, (0, 1, 2, 3))  # one pinned worker per GPU
    assert default_workers(tri, "cuda:2") == (4, ())  # an explicit GPU: shared by 4
    assert default_workers(tri, "cpu") == (16, ())
    assert default_workers(get_kernel("cpu")) == (16, ())


def test_a_pool_worker_takes_one_gpu_from_the_queue(monkeypatch):
    import queue

    from conformance.sweep import distributed

    q = queue.Queue()
    q.put(3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)
    distributed._init_worker(1, q)
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"


def test_the_f8_headline_only_where_f8_was_swept():
    """ "F8 fired in 0 check-cells" is F8's false-alarm count: it is printed only where the null fault ran (issue 42
    item 9)."""
    from conformance.sweep.scoring import headlines, observations

    def row(fault, verdict):
        gt = {"selected": 1, "changed": 1, "max_spacing": 1, "no_op": False}
        return dict(layer="l0", fault=fault, coverage="all", scale_mode="own", seed=0, check_id="C5", verdict=verdict,
                    ground_truth=gt)  # fmt: skip

    assert headlines(observations([row("F4", "fail")]))["f8_fired"] is None
    assert headlines(observations([row("F4", "fail"), row("F8", "pass")]))["f8_fired"] == 0
    assert headlines(observations([row("F8", "fail")]))["f8_fired"] == 1


def test_detection_png_does_not_draw_a_no_op_fault_as_a_miss():
    """A check silent where the fault changed no output did not miss it (issue 42 item 9): the heatmap's rate and
    text count only the cells where an output changed; a cell of no-op faults alone reads "no-op", not 0/N."""
    import math
    from types import SimpleNamespace as R

    from conformance.sweep.scorecard import heat_cell
    from conformance.sweep.scoring import observations, predicted, table

    rate, text = heat_cell(R(fired=0, silent=4, silent_no_op=4))
    assert math.isnan(rate) and text == "no-op"
    assert heat_cell(R(fired=2, silent=3, silent_no_op=1)) == (0.5, "2/4\n+1 no-op")
    assert heat_cell(R(fired=3, silent=1, silent_no_op=0)) == (0.75, "3/4")
    rate, text = heat_cell(R(fired=0, silent=0, silent_no_op=0))
    assert math.isnan(rate) and text == "n/a"

    def row(seed, verdict, no_op):
        gt = {"selected": 1, "changed": 0 if no_op else 1, "max_spacing": 0 if no_op else 1, "no_op": no_op}
        return dict(layer="l0", fault="F4", coverage="one", scale_mode="own", seed=seed, check_id="C8",
                    verdict=verdict, ground_truth=gt)  # fmt: skip

    card = table(predicted(observations([row(0, "pass", True), row(1, "fail", False)]), {}), [])
    assert (card.loc[0, "silent"], card.loc[0, "silent_no_op"]) == (1, 1)
    assert heat_cell(next(card.itertuples())) == (1.0, "1/1\n+1 no-op")
