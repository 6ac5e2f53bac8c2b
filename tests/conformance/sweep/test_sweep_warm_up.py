"""The sweep's warm-up (``distributed.warm_up_sweep``): a no-op with its reason off CUDA; the layouts it would compile
(``runner.layer_layouts``) name every variant the layer cells really launch, each variant in one group."""

import pytest
import torch

from conformance.kernels import builtin_triton as bt
from conformance.suite.warmup import plan_groups
from conformance.sweep.cells import SweepSpec, layer_cells
from conformance.sweep.distributed import warm_up_sweep
from conformance.sweep.runner import SweepTask, layer_layouts, run_unit

K_PROJ = "model.layers.0.self_attn.k_proj"  # 64 x 384 x 128
K_PROJ_1 = "model.layers.1.self_attn.k_proj"  # the same shape


def _tasks(kernel, layers, faults):
    from reference.model.capture import default_capture_set

    cs = default_capture_set()
    if cs is None:
        pytest.skip("default captures not built")
    spec = SweepSpec(kernel, "d", str(cs.dir), cs.model_digest, "", {"windows": 1, "window_len": 8}, False)
    return [SweepTask(c, spec) for c in layer_cells(layers, faults, ["one"], ["own"], [0])]


def _zeros(layout):
    if layout is None:
        return None
    shape, stride, dtype, _ = layout
    return torch.zeros(1 + sum((n - 1) * s for n, s in zip(shape, stride)), dtype=getattr(torch, dtype)).as_strided(
        shape, stride
    )


def test_off_cuda_the_warm_up_compiles_nothing_and_says_why():
    for kernel in ("cpu", "triton"):
        got = warm_up_sweep(_tasks(kernel, [K_PROJ], ["F4"]), workers=2)
        assert got == {"skipped": f"kernel {kernel!r} does not run on CUDA here: nothing is compiled ahead"}
    assert warm_up_sweep([], workers=2) == {"skipped": "no layer cell to run"}


def test_the_planned_variants_are_those_the_cells_launch_each_once(monkeypatch):
    tasks = _tasks("triton", [K_PROJ, K_PROJ_1], ["F4", "F6", "F7"])
    layouts = layer_layouts(tasks)
    # base 64x384x128 (both layers: one shape), the F6 16x16 window and the F7 whole case, each K-extended:
    # K_PROJ's captured max|acc| 611372 < 16384 * 256 / 2 leaves one K' each (131584, 1536)
    ks = sorted(lay[0][0][1] for lay in layouts)
    assert ks == [384, 1536, 131584] and all(lay[-1] for lay in layouts)
    keys = {
        lay: bt.variant_key(*map(_zeros, lay[:4]), out_dtype=torch.bfloat16, bias=_zeros(lay[4])) for lay in layouts
    }
    groups = plan_groups(layouts, keys)
    launched = set()
    run = bt._run

    def recording(a, b, scale_a, scale_b, bias, out_dtype, config=None):
        if out_dtype is not None:
            launched.add(bt.variant_key(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias))
        return run(a, b, scale_a, scale_b, bias, out_dtype, config)

    monkeypatch.setattr(bt, "_run", recording)
    run_unit(tuple(t for t in tasks if t.cell.layer == K_PROJ))
    # three distinct variants really launched (interpreter tiles differ with K), each planned and in one group
    assert len(launched) == 3 == len(groups)
    assert launched == {keys[g[0]] for g in groups}
