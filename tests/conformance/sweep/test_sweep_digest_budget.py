"""Full SHA-256 tensor digests (``reference.operands._digest``) a sweep cell
takes: pinned per fault, so a change that makes the per-cell hot path hash
operands it already knows (a copy or view that loses its source's digest, a
clone per check, ...) fails here (issue 7d). Every digest counted below is
of a tensor first built in that cell whose SHA-256 is stored (the
``case_digest`` over ``GemmOperands.digests()``, C2's received digests)."""

from sweep_spec import default_capture_sweep_spec

import conformance.sweep.runner as R
import reference.operands as O
from conformance.sweep.cells import layer_cells
from conformance.sweep.runner import SweepTask, run_layer_batch

LAYER = "model.layers.0.self_attn.k_proj"  # 64 x 384 x 128


def _spec():
    return default_capture_sweep_spec("digest")


def test_a_sweep_cell_hashes_only_the_operands_it_builds_itself(monkeypatch):
    spec = _spec()
    hashed, per_cell = [], []
    orig_digest, orig_cell = O._digest, R.run_layer_cell

    def digest(t):
        hashed.append((tuple(t.shape), t.dtype))
        return orig_digest(t)

    def cell(task, ctx=None):
        n = len(hashed) if per_cell else 0  # the batch's set-up counts with its first cell
        out = orig_cell(task, ctx)
        per_cell.append((task.cell.fault, task.cell.coverage, hashed[n:]))
        return out

    monkeypatch.setattr(O, "_digest", digest)
    monkeypatch.setattr(R, "run_layer_cell", cell)
    faults = ["F8", "F1", "F2", "F3", "F4", "F5", "F6", "F7", "F9"]
    run_layer_batch([SweepTask(c, spec) for c in layer_cells([LAYER], faults, ["one"], ["own"], [0])])
    import torch

    first = per_cell[0]
    # the batch (its set-up or first cell) loads the layer: the capture file's three
    # tensors checked against the capture manifest, the weight and its
    # scales against the checkpoint digests -- once per (layer, scale mode)
    assert first[:2] == ("F8", "one") and len(first[2]) == 5
    counts = {(f, cov): h for f, cov, h in per_cell[1:]}
    assert len(counts) == len(faults) - 1
    for f in ("F1", "F2", "F3", "F4", "F5"):
        # the operands are the batch's: copies inherit their digests
        assert counts[(f, "one")] == [], f
    for cov in ("one",):
        # F9: the one operand the wrapper swapped in (scale_b, N = 128)
        assert counts[("F9", cov)] == [((128,), torch.float32)]
        # F7: the K-extended a [M, K'] and b [N, K'] carry their recipe's digest
        # (reference.operands.derived_digest): nothing is copied to the host and hashed
        assert counts[("F7", cov)] == []
        # F6: the window (16 rows of a [16, 384], 16 channels of b, and their scale
        # vectors), each once, small; the K-extended a and b built from it (K' past
        # 131072) carry recipe digests over the window's
        assert counts[("F6", cov)] == [
            ((16, 384), torch.int8),
            ((16, 384), torch.int8),
            ((16,), torch.float32),
            ((16,), torch.float32),
        ]
