"""conformance.study.flips and e2e_agreement comparisons on synthetic replays
with known flips and known divergences."""

import pytest
import torch

from conformance.study.e2e_agreement import compare_runs
from conformance.study.flips import flip_deciles
from reference.model.forward import TeacherForced


def _tf(argmax, margin, top1=None):
    argmax = torch.as_tensor(argmax).reshape(2, -1)
    margin = torch.as_tensor(margin, dtype=torch.float32).reshape(2, -1)
    top1 = torch.full_like(margin, 10.0) if top1 is None else top1
    return TeacherForced(argmax, margin, top1, torch.zeros(2, argmax.shape[1] - 1))


def test_flips_land_in_the_deciles_of_their_margins():
    # 100 positions with margins 0.01 * (0..99) (distinct): decile d holds margins
    # [0.1 (d-1), 0.1 d). Flip positions with margins 0.00, 0.05 (decile 1) and
    # 0.95 (decile 10); 10.0 has bf16 spacing 0.0625, so 0.95 is above 4 spacings.
    margin = torch.arange(100, dtype=torch.float32) * 0.01
    a = torch.arange(100)
    b = a.clone()
    for i in (0, 5, 95):
        b[i] += 1
    r = flip_deciles(_tf(a, margin), _tf(b, margin))
    assert r["positions"] == 100 and r["flips"] == 3
    assert [d["flips"] for d in r["deciles"]] == [2, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert all(d["positions"] == 10 for d in r["deciles"])
    assert r["deciles"][0]["rate"] == pytest.approx(0.2)
    assert r["flips_above_4_spacings"] == 1
    assert r["max_flip_margin_spacings"] == pytest.approx(0.95 / 0.0625, rel=1e-6)


def test_tied_margins_still_make_ten_equal_deciles():
    margin = torch.zeros(40)
    a = torch.zeros(40, dtype=torch.long)
    r = flip_deciles(_tf(a, margin), _tf(a, margin))
    assert [d["positions"] for d in r["deciles"]] == [4] * 10 and r["flips"] == 0


def _run(tokens, top1, margin):
    return {"tokens": tokens, "top1": top1, "margin": margin}


def test_compare_runs_finds_first_divergence_and_its_margins():
    x = [_run([1, 2, 3, 4], [5.0] * 4, [1.0, 0.5, 0.03125, 2.0]), _run([7, 7], [5.0, 5.0], [1.0, 1.0])]
    y = [_run([1, 2, 9, 9], [5.0] * 4, [1.0, 0.25, 0.0, 2.0]), _run([7, 7], [5.0, 5.0], [1.0, 1.0])]
    c = compare_runs(x, y)
    assert c["prompts"] == 2 and c["identical_sequences"] == 1 and c["identical_logits"] == 1
    p0 = c["per_prompt"][0]
    assert p0["first_divergence"] == 2 and p0["tokens"] == [3, 9]
    assert p0["first_logit_difference"] == 1  # margins already differed one step earlier
    assert p0["margin_x"] == 0.03125 and p0["margin_y"] == 0.0
    assert p0["margin_x_spacings"] == pytest.approx(1.0)  # bf16 spacing at 5.0 is 2^-5
    assert c["per_prompt"][1]["identical"] and c["per_prompt"][1]["first_divergence"] is None


def test_equal_tokens_with_different_logits_are_not_logit_identical():
    x = [_run([1, 2], [5.0, 5.0], [1.0, 1.0])]
    y = [_run([1, 2], [5.0, 5.03125], [1.0, 1.0])]
    c = compare_runs(x, y)
    assert c["identical_sequences"] == 1 and c["identical_logits"] == 0
    assert c["per_prompt"][0]["first_logit_difference"] == 1
