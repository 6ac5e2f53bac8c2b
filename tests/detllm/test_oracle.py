"""detllm float guard, accumulator-path faults, the E1 oracle and the CLI."""

import re

import pytest
import torch

from detllm import engine as E
from detllm import generate as G
from detllm import guard, oracle
from detllm.prepare import PrepareOptions, make_tiny_model, prepare
from reference.errors import Int8confError, OperandError

PROMPT = [3, 99, 250, 7, 7, 400, 12, 1]


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("det_orc")
    md = make_tiny_model(d / "model", seed=3, num_hidden_layers=1)
    a = prepare(md, d / "art", PrepareOptions(calib_windows=4, calib_len=32, calib_source="random"))
    yield a
    torch.set_num_threads(prev)


@pytest.fixture(scope="module")
def clean(art):
    return G.generate(E.load_engine(art, guard=False), [PROMPT], 4)


# ------------------------------------------------------------------ guard


def test_guarded_forward_runs_and_matches_unguarded(art, clean):
    eng = E.load_engine(art, guard=True)
    with guard.float_guard() as g:
        r = G.generate(eng, [PROMPT], 4)
        assert g.ops_seen > 100  # the guard really inspected the forward's ops
    assert r.logits_hash == clean.logits_hash


def test_guard_fires_on_planted_float_op(art, monkeypatch):
    real = E.quant_rows

    def planted(v):
        _ = v.to(torch.float32) * 0.5  # a float op hidden inside the forward
        return real(v)

    monkeypatch.setattr(E, "quant_rows", planted)
    eng = E.load_engine(art, guard=True)
    with pytest.raises(guard.FloatOpError) as ei:
        G.generate(eng, [PROMPT], 1)
    assert "float32" in str(ei.value) and "\n" not in str(ei.value)
    assert isinstance(ei.value, Int8confError)
    eng.guard = False  # without the guard the same plant goes unnoticed
    G.generate(eng, [PROMPT], 1)


def test_guard_catches_float_scalar_arithmetic():
    with pytest.raises(guard.FloatOpError):
        with guard.float_guard():
            torch.arange(4) * 0.5
    with pytest.raises(guard.FloatOpError):
        with guard.float_guard():
            torch.arange(4) / 2  # true division of ints is a float op
    with guard.float_guard():  # integer ops pass
        assert int((torch.arange(4) // 2).sum()) == 2


def test_kernel_returning_wrong_dtype_is_refused(art):
    eng = E.load_engine(art, lambda a, b: E.reference_int_mm(a, b).to(torch.int64), guard=False)
    with pytest.raises(OperandError, match="expected int32"):
        G.generate(eng, [PROMPT], 1)


# ------------------------------------------------------------------ faults


def test_accumulator_faults_change_the_hash(art, clean):
    """Precondition fault (int32 wraparound of ONE accumulator, in the first
    GEMM or in the very last lm_head GEMM) and operand fault (transposed /
    stale weight) each change the hash; the clean wrapper does not."""
    res = oracle.fault_sensitivity(art, [PROMPT], max_new_tokens=4)
    assert res["clean"]["logits_hash"] == clean.logits_hash[0][:12]
    for name in ("int32_wraparound_first_gemm", "int32_wraparound_last_gemm", "transposed_or_stale_weight"):
        assert res[name]["changed"], name
        assert res[name]["logits_hash"] != res["clean"]["logits_hash"]
    # control: position 0's query attends only to itself (softmax == 1 exactly),
    # so wrapping its accumulator cannot change any logit -- and does not
    assert not res["control_wraparound_query_of_position_0"]["changed"]


def test_wraparound_fault_arithmetic():
    a = torch.tensor([[1, 2]], dtype=torch.int8)
    b = torch.tensor([[3, 4], [5, 6]], dtype=torch.int8)
    f = oracle.wraparound_fault(E.reference_int_mm, call_index=0, row=-1, col=1)
    out = f(a, b)
    assert out.dtype == torch.int32
    assert out.tolist() == [[11, 17 - 2**31]]  # 17 + 2^31 wrapped into int32
    assert f(a, b).tolist() == [[11, 17]]  # only the chosen call


# ------------------------------------------------------------------ oracle


def test_engine_hash_check_pass_fail_na(art):
    from conformance.checks.engine_hash import check_engine_hash
    from conformance.kernels.registry import get_kernel
    from conformance.kernels.spec import KernelSpec

    spec = get_kernel("cpu")
    r = check_engine_hash(spec, artifact=art, prompts=[PROMPT, PROMPT[:3]], max_new_tokens=3)
    assert (r.check_id, r.name, r.verdict) == ("E1", "engine_hash", "pass")
    assert r.evidence["kernel_logits_hash"] == r.evidence["reference_logits_hash"]
    bad = KernelSpec(
        name="wrap",
        scaled_mm=spec.scaled_mm,
        contract=spec.contract,
        int_mm=oracle.wraparound_fault(E.reference_int_mm, call_index=2),
    )
    r = check_engine_hash(bad, artifact=art, prompts=[PROMPT], max_new_tokens=3)
    assert r.verdict == "fail" and r.evidence["mismatched_sequences"] == [0]

    def boom(a, b):
        raise RuntimeError("kernel exploded")

    r = check_engine_hash(
        KernelSpec(name="boom", scaled_mm=spec.scaled_mm, contract=spec.contract, int_mm=boom),
        artifact=art,
        prompts=[PROMPT],
        max_new_tokens=2,
    )
    assert r.verdict == "fail" and "kernel exploded" in r.evidence["error"]
    none = KernelSpec(name="noacc", scaled_mm=spec.scaled_mm, contract=spec.contract)
    assert check_engine_hash(none, artifact=art).verdict == "n/a"


# ------------------------------------------------------------------ CLI


def test_cli_generate_prints_the_api_hashes(art, clean, capsys):
    from detllm.cli import main

    rc = main(
        [
            "generate",
            "--artifact",
            str(art.path),
            "--ids",
            ",".join(map(str, PROMPT)),
            "-n",
            "4",
            "--no-guard",
            "--kernel",
            "cpu",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    m = re.search(r"logits ([0-9a-f]{12})  tokens ([0-9a-f]{12})", out)
    assert m and m.groups() == clean.short(0), out


def test_cli_demo_table_all_integer_hashes_identical(art, clean, capsys):
    from detllm.cli import main

    rc = main(
        [
            "demo",
            "--artifact",
            str(art.path),
            "--ids",
            ",".join(map(str, PROMPT)),
            "-n",
            "4",
            "--no-float",
            "--no-guard",
            "--kernels",
            "cpu,int_mm",
            "--context-tokens",
            "64",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "integer hashes identical across all 7 configurations: YES" in out
    assert "whole-context integer hashes identical: YES" in out
    assert f"logits hash {clean.logits_hash[0]}" in out
