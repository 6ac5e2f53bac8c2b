"""Lockstep batching of per-prompt runs (conformance.study.lockstep) and the
study's interpreter tiles for the built-in triton kernel (conformance.study.interp):
both must leave every measured bit unchanged."""

import threading

import pytest
import torch
from tiny_qwen3 import tiny_model

from conformance.study.e2e_agreement import generate, prefill_run
from conformance.study.lockstep import Lockstep, LockstepError
from reference.contract import CUTLASS_STYLE
from reference.model import forward as wf

PROMPTS = [[5, 17, 300, 2, 9], [44, 1], [7, 7, 7, 100, 200, 301, 5, 6]]


@pytest.fixture(scope="module")
def base():
    return tiny_model(seed=5)


def _model(base, wrap=None, counter=None):
    ref = wf.reference_scaled_mm_for(CUTLASS_STYLE)

    def counted(*args, **kw):
        if counter is not None:
            counter.append(int(args[0].shape[0]))
        return ref(*args, **kw)

    names = wf.linear_names(base.config.num_hidden_layers)
    fns = {n: counted for n in names}
    model, _ = wf.build_w8a8_model(base, wf.quantize_weights(base), wrap(fns) if wrap else fns)
    return model


def test_lockstep_generation_equals_one_prompt_at_a_time(base):
    solo_calls, lock_calls = [], []
    solo = generate(_model(base, counter=solo_calls), PROMPTS, 4)
    ls = Lockstep(len(PROMPTS))
    lock = generate(_model(base, ls.wrap_all, lock_calls), PROMPTS, 4, ls)
    assert lock == solo  # tokens, top-1 logits and margins, bit for bit
    linears = 7 * base.config.num_hidden_layers
    # one batched call per layer and forward: 4 forwards (1 prefill + 3 decode steps)
    assert len(lock_calls) == 4 * linears and len(solo_calls) == 3 * 4 * linears
    # rows: the prefill carries every prompt (5 + 2 + 8 = 15), a decode step one row per prompt
    assert lock_calls[:linears] == [15] * linears and lock_calls[linears:] == [3] * (3 * linears)
    assert ls.calls == 4 * linears and ls.rows == linears * (15 + 3 * 3)
    pre_solo = prefill_run(_model(base), PROMPTS, solo)
    ls2 = Lockstep(len(PROMPTS))
    assert prefill_run(_model(base, ls2.wrap_all), PROMPTS, solo, ls2) == pre_solo


def test_lockstep_threads_that_leave_step_fail_instead_of_hanging(base):
    ls = Lockstep(2)
    model = _model(base, ls.wrap_all)
    ids = torch.tensor([[1, 2, 3]])

    def uneven(i):  # thread 1 makes one forward more than thread 0
        with torch.no_grad():
            for _ in range(1 + i):
                model(input_ids=ids)

    box = {}
    t = threading.Thread(target=_capture, args=(box, ls, uneven))
    t.start()
    t.join(timeout=300)  # a hang never ends; a loaded machine may take long
    assert not t.is_alive(), "lockstep hung"
    assert isinstance(box.get("err"), LockstepError)


def _capture(box, ls, fn):
    try:
        ls.run(fn)
    except BaseException as exc:  # noqa: BLE001
        box["err"] = exc


def test_lockstep_kernel_error_reaches_every_caller(base):
    ls = Lockstep(2)

    def bad(*a, **k):
        raise RuntimeError("kernel exploded")

    names = wf.linear_names(base.config.num_hidden_layers)
    model, _ = wf.build_w8a8_model(base, wf.quantize_weights(base), ls.wrap_all({n: bad for n in names}))
    with pytest.raises(RuntimeError, match="kernel exploded"):
        generate(model, PROMPTS[:2], 1, ls)


@pytest.mark.parametrize("m,k,n,bias", [(37, 200, 70, False), (1, 130, 300, True), (300, 64, 17, True)])
def test_study_interpreter_tiles_give_the_default_tiles_bits(m, k, n, bias):
    from conformance.kernels import builtin_triton as bt
    from conformance.kernels.registry import resolve_kernels
    from conformance.study.interp import interp_config, study_kernel

    g = torch.Generator().manual_seed(m + k + n)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    sa = torch.rand(m, generator=g) * 0.02
    sa[0] = 0.0  # zero scale (all-zero activation row) is legal
    sb = torch.rand(n, generator=g) * 1e-3 + 1e-5
    bb = (torch.randn(n, generator=g) * 3).to(torch.bfloat16) if bias else None
    spec = resolve_kernels(["triton"])[0]
    fast = study_kernel(spec, "cpu")
    assert fast is not spec and fast.name == spec.name and fast.source_digest == spec.source_digest
    cfg = interp_config(m, n)
    assert cfg.block_m >= min(m, 256) and cfg.block_n >= min(n, 512)  # one tile row for these M
    want = bt.scaled_mm(a, b, sa, sb, torch.bfloat16, bb).view(torch.int16)
    got = fast.scaled_mm(a, b, sa, sb, torch.bfloat16, bb).view(torch.int16)
    assert torch.equal(got, want)
    assert study_kernel(resolve_kernels(["cpu"])[0], "cpu").scaled_mm is resolve_kernels(["cpu"])[0].scaled_mm
    assert study_kernel(spec, "cuda") is spec


def test_e2e_runs_resume_after_the_last_finished_run(tmp_path):
    from conformance.study.e2e_agreement import ResumableRuns

    calls = []

    def run(tag):
        def compute():
            calls.append(tag)
            return [{"tokens": [1, 2], "top1": [0.5, 0.25], "margin": [0.0, 0.125], "tag": tag}]

        return compute

    key = {"kernels": ["cpu", "triton"], "new_tokens": 2}
    first = ResumableRuns(tmp_path, key)
    got = first.get("generate-cpu-own", run("a"))
    again = ResumableRuns(tmp_path, dict(key))
    assert again.get("generate-cpu-own", run("b")) == got and again.reused == ["generate-cpu-own"]
    assert calls == ["a"]  # the interrupted part's finished run is not recomputed
    other = ResumableRuns(tmp_path, dict(key, new_tokens=3))  # other settings: recomputed
    assert other.get("generate-cpu-own", run("c"))[0]["tag"] == "c" and calls == ["a", "c"]
    assert ResumableRuns(None, key).get("x", run("d"))[0]["tag"] == "d" and not list(tmp_path.glob("x.json"))


def test_lockstep_uneven_threads_never_hang_when_one_finishes_between_rounds():
    """Many rounds in which one thread finishes while the others are on their way to the next round: each run
    ends in a LockstepError (a thread that checked for a finished peer just before it finished used to wait for
    ever)."""

    def kernel(a, b, sa, sb, out_dtype, bias):
        return a.to(out_dtype)

    def one_run(_):
        ls = Lockstep(4)
        mm = ls.wrap("layer", kernel)
        ones = torch.ones(1, 2)

        def uneven(i):  # thread i makes i + 1 calls
            for _ in range(i + 1):
                mm(ones, None, ones, None, torch.float32)

        with pytest.raises(LockstepError):
            ls.run(uneven)
        return ls.calls

    box = {}
    t = threading.Thread(target=lambda: box.update(calls=[one_run(r) for r in range(300)]))
    t.start()
    t.join(timeout=300)
    assert not t.is_alive(), "lockstep hung"
    assert box["calls"] == [1] * 300  # one full round (every thread's first call), then the shortest thread finished
