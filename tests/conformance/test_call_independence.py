"""C10 call_independence, calls in sequence (issue 41 item 4): the default suite's sequence-probed cases replay the
case after the caller rewrote the previous call's tensors in place, after another out dtype, the other bias presence
and another scale form; one buggy kernel per stale state (tests/helpers/buggy_kernels.py, buggy_fp8_kernels.py) fails
C10 on its pinned default case, with the preceding call and the first differing element's bits (computed here
independently); the built-ins' calls in sequence give the case's bits."""

from __future__ import annotations

import functools

import buggy_fp8_kernels
import buggy_kernels
import pytest
import torch
from buggy_kernels import _cutlass_out, exact_acc32

from conformance.checks.ownership import check_call_independence
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import start_kernel
from conformance.suite.evaluate import evaluate_case
from conformance.suite.plan import default_cases
from reference.operands import GemmOperands

INPLACE = "the caller wrote the case's values in place into the previous call's a, b, scale_a, scale_b"
AFTER_FP16 = "a call with out_dtype=float16 (the case's operands otherwise)"
AFTER_NO_BIAS = "a call without bias (the case's operands otherwise)"


@functools.lru_cache(maxsize=None)
def _default(operands: str = "int8") -> dict:
    cases, _ = default_cases(include_captures=False, operands=operands)
    return {c.name: c for c in cases}


def _pinned(name: str, operands: str = "int8") -> GemmOperands:
    case = _default(operands)[name]
    assert case.meta["ownership_probe"] and case.meta["sequence_probe"]  # the default suite replays it
    return case


def _bits(t: torch.Tensor, i: int, j: int) -> str:
    return f"0x{int(t[i, j].view(torch.int16)) & 0xFFFF:04x}"


def _c10(kernel: str, case: GemmOperands):
    res = evaluate_case(get_kernel(kernel), case, device="cpu")
    return res.checks["C10"]


def _failed_steps(c10) -> dict:
    return {s["after"]: s for s in c10.evidence["sequence"] if s.get("differing") or s.get("error")}


def _inverted(case: GemmOperands) -> torch.Tensor:
    """The ownership call's b (``~b``): what a cache keyed on the tensor rather than its contents keeps."""
    return case.b.bitwise_not()


@pytest.mark.parametrize(
    "kernel, cache", [("weight_cache_by_data_ptr", "_PACKED_BY_PTR"), ("transposed_b_by_id", "_TRANSPOSED_BY_ID")]
)
def test_a_weight_cache_keyed_by_the_tensor_goes_stale_on_an_in_place_update(kernel, cache):
    case = _pinned("synthetic/ordinary-s0")
    getattr(buggy_kernels, cache).clear()
    c10 = _c10(f"buggy_kernels:{kernel}", case)
    assert c10.verdict == "fail"
    step = _failed_steps(c10)[INPLACE]
    assert list(_failed_steps(c10)) == [INPLACE]  # only the in-place update reaches the cache
    # the replay multiplied by the old weight ~b with the case's a and scales
    stale = _cutlass_out(exact_acc32(case.a, _inverted(case)), case.scale_a, case.scale_b, case.out_dtype, None)
    first = _cutlass_out(exact_acc32(case.a, case.b), case.scale_a, case.scale_b, case.out_dtype, None)
    assert _evidence(step) == _first_difference(stale, first)
    assert f"after {INPLACE} differs from the case's first result at {step['differing']} elements" in c10.summary


def _first_difference(later: torch.Tensor, first: torch.Tensor) -> tuple:
    """(count, [i, j], later bits, first bits) of two bf16 [M, N] results, row-major first."""
    differ = (later.view(torch.int16) != first.view(torch.int16)).reshape(-1)
    i, j = divmod(int(differ.nonzero()[0]), first.shape[1])
    return int(differ.sum()), [i, j], _bits(later, i, j), _bits(first, i, j)


def _evidence(step: dict) -> tuple:
    f = step["first"]
    return step["differing"], f["index"], f["later_bits"], f["first_bits"]


@pytest.mark.parametrize(
    "name, after",
    [
        # bf16 without bias: the replay after the fp16 call is rounded to fp16, then converted to bf16
        ("synthetic/ordinary-s0", (AFTER_FP16,)),
        # bf16 with bias: that, and the replay after the call without bias drops the bias
        ("tile_edges/M3xK15xN17", (AFTER_FP16, AFTER_NO_BIAS)),
    ],
)
def test_an_epilogue_descriptor_kept_from_the_previous_call_fails_after_fp16_and_after_no_bias(name, after):
    case = _pinned(name)
    buggy_kernels._EPILOGUE_BY_SHAPE.clear()
    c10 = _c10("buggy_kernels:epilogue_config_by_shape", case)
    assert c10.verdict == "fail"
    steps = _failed_steps(c10)
    assert sorted(steps) == sorted(after)
    acc, sa, sb, bias = exact_acc32(case.a, case.b), case.scale_a, case.scale_b, case.bias
    first = _cutlass_out(acc, sa, sb, torch.bfloat16, bias)
    via_fp16 = _cutlass_out(acc, sa, sb, torch.float16, bias).to(torch.bfloat16)
    assert _evidence(steps[AFTER_FP16]) == _first_difference(via_fp16, first)
    if AFTER_NO_BIAS in after:
        no_bias = _cutlass_out(acc, sa, sb, torch.bfloat16, None)
        assert _evidence(steps[AFTER_NO_BIAS]) == _first_difference(no_bias, first)


def test_a_split_k_workspace_zeroed_only_when_allocated_fails_every_replay():
    case = _pinned("synthetic/epilogue_ties-s0")  # K = 1024: the split-K path
    assert case.k >= buggy_kernels.SPLITK_MIN_K
    buggy_kernels._SPLITK_WORKSPACE.clear()
    c10 = _c10("buggy_kernels:splitk_workspace_not_zeroed", case)
    assert c10.verdict == "fail"
    steps = [s for s in c10.evidence["sequence"] if s["compared"] == "replay"]
    assert len(steps) == 4 and all(s["differing"] for s in steps)
    # the in-place replay is the third call: the workspace holds a.b + (~a).(~b) (the ownership call) + a.b
    acc = exact_acc32(case.a, case.b).to(torch.int64)
    other = exact_acc32(case.a.bitwise_not(), case.b.bitwise_not()).to(torch.int64)
    third = _cutlass_out((2 * acc + other).to(torch.int32), case.scale_a, case.scale_b, case.out_dtype, None)
    first = _cutlass_out(acc.to(torch.int32), case.scale_a, case.scale_b, case.out_dtype, None)
    assert steps[0]["after"] == INPLACE
    assert _evidence(steps[0]) == _first_difference(third, first)


def test_the_same_scale_values_in_another_form_must_give_the_case_bits():
    case = _pinned("synthetic/ordinary-s0")  # scale_a [8]: the variant passes it as [8, 1]
    c10 = _c10("buggy_kernels:column_scale_a_first_row", case)
    assert c10.verdict == "fail"
    (step,) = [s for s in c10.evidence["sequence"] if s.get("differing")]
    assert step["compared"].startswith(
        "variant: a call with the same scale values in another form (scale_a [8] -> [8,1]"
    )
    acc = exact_acc32(case.a, case.b)
    row0 = case.scale_a[:1].expand(case.m)
    first = _cutlass_out(acc, case.scale_a, case.scale_b, case.out_dtype, None)
    assert _evidence(step) == _first_difference(_cutlass_out(acc, row0, case.scale_b, case.out_dtype, None), first)


def _flip_sign(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8).bitwise_xor(0x80).view(t.dtype)


def test_an_fp8_weight_cache_keyed_by_data_ptr_goes_stale_on_an_in_place_update():
    case = _pinned("fp8/small_int/k_tail-real-bf16", "e4m3")
    buggy_fp8_kernels._FP8_WEIGHTS_BY_PTR.clear()
    c10 = _c10("buggy_fp8_kernels:fp8_weight_cache_by_data_ptr", case)
    assert c10.verdict == "fail"
    assert list(_failed_steps(c10)) == [INPLACE]
    epi = buggy_fp8_kernels._epilogue
    stale = epi(case.a, _flip_sign(case.b), case.scale_a, case.scale_b, case.out_dtype, case.bias)
    first = epi(case.a, case.b, case.scale_a, case.scale_b, case.out_dtype, case.bias)
    assert _evidence(_failed_steps(c10)[INPLACE]) == _first_difference(stale, first)


#: the sequence-probed default cases the built-ins' test replays: those up to SMALL multiply-accumulates (every scale
#: form, out dtype and bias presence among them); ``int8conf check`` replays all
SMALL = 1 << 18


def _sequence_verdicts(kernel: str, operands: str) -> list:
    """``(case, compared calls, C10 verdict)`` of ``kernel`` on the cases :data:`SMALL` names (the kernel call and its
    probe only)."""
    spec = get_kernel(kernel)
    out = []
    for case in _default(operands).values():
        if case.meta["sequence_probe"] and case.m * case.n * case.k <= SMALL:
            run = start_kernel(spec, case, device="cpu", probe_ownership=True).result()
            out.append(
                (
                    case.name,
                    len(run.manifest["extra"]["ownership"]["sequence"]),
                    check_call_independence(spec, case, run).verdict,
                )
            )
    return out


@pytest.mark.parametrize("kernel, operands", [("cpu", "int8"), ("int_mm", "int8"), ("fp8-cpu", "e4m3")])
def test_builtins_give_the_case_bits_in_every_sequence(kernel, operands):
    got = _sequence_verdicts(kernel, operands)
    # 5 compared calls each on int8 (the form variant too), 4 on e4m3; int8: 28 + 2 covering cases (M = 1);
    # e4m3: 10 + the signed-zero family's prefill case (M = 129, N = 16, K = 48: a coarse class of its own) + the
    # scale_values token case (M = 1, N = 16, K = 32)
    assert len(got) == (30 if operands == "int8" else 12)
    assert {(n, v) for _, n, v in got} == {(5 if operands == "int8" else 4, "pass")}
