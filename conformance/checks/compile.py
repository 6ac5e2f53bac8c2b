"""C14 compile: the kernel called inside a ``torch.compile``d function gives the eager call's bits; a registered
custom op also has a fake (meta) implementation that agrees with the real output and passes ``torch.library.opcheck``.

:func:`registered_op` tells a custom op (``torch.library.custom_op``'s ``CustomOpDef``, a ``torch.ops`` ``OpOverload``
or its packet's ``default``) from a plain callable. On the sample's core cases (``serving.sample_cases``: the decode
and the prefill case) the kernel is called eagerly and through ``torch.compile(backend="inductor")``
(``fullgraph=True`` for a custom op: a graph break there is what breaks vLLM's compiled model; else the default, graph
breaks allowed) after ``torch.compiler.reset()`` (no earlier compile's cache or recompile limit decides it); the bits
must agree. For a custom op also: ``opcheck``'s failures on the first case, and on every case of the sample (its
covering rows reach each M regime, scale form, bias and out dtype) the fake output's shape, dtype and strides
(``FakeTensorMode``) against the real one's: a fake may be wrong on one path only, and a fake costs no compile. A
plain callable that calls a custom op (vLLM's ``ops.cutlass_scaled_mm`` over ``torch.ops._C``; :func:`wrapped_op`:
one eager call, made when its own code names an op, :func:`names_an_op`) is a wrapper: compiled with
``fullgraph=True``, its fake compared through it (no opcheck).

Where it runs (the decision, issue 45): CUDA, every kernel, on the sample. The CPU: a registered custom op only,
compiled on one tiny case (:data:`CPU_SHAPE`: about 5 s on the 2-core CI, most of it inductor's first compile) and
its fake on the whole sample, so a wrong fake is found without a GPU; a wrapper's fake on the whole sample, not
compiled; any other plain Python kernel on the CPU is ``n/a``
(dynamo tracing the CPU kernels' reference code and inductor's C++ build would cost the CI minutes per kernel, and no
serving stack compiles a CPU W8A8 GEMM)."""

from __future__ import annotations

import contextlib
import inspect
import logging
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from torch.overrides import TorchFunctionMode

from conformance.checks import serving
from conformance.checks.result import CheckResult, Verdict, not_applicable
from conformance.kernels.runner import pick_device

CHECK_ID, NAME = "C14", "compile"
#: (M, out dtype) of the one CPU case (a custom op only; K x N as the sample's)
CPU_SHAPE = (4, torch.bfloat16)
CPU_REASON = (
    "not compiled on the CPU: a plain Python kernel (no custom op) is compiled only on CUDA, where it would run in "
    "serving (inductor tracing a CPU kernel costs minutes); a registered custom op gets one tiny CPU case"
)
#: opcheck's tests (torch's defaults, as vLLM's kernel tests run them)
OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def registered_op(fn: Any) -> Optional[Any]:
    """The ``OpOverload`` of a registered custom op ``fn`` (a ``CustomOpDef``, an ``OpOverload`` or an
    ``OpOverloadPacket``), None for any other callable."""
    if isinstance(fn, torch._ops.OpOverload):
        return fn
    if isinstance(fn, torch._ops.OpOverloadPacket):
        return getattr(fn, "default", None)
    op = getattr(fn, "_opoverload", None)  # torch._library.custom_ops.CustomOpDef
    return op if isinstance(op, torch._ops.OpOverload) else None


class _CustomOpCalls(TorchFunctionMode):
    """Records the registered ops outside ``aten`` / ``prims`` a callable calls (``torch.ops`` overloads or packets)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        op = registered_op(func)
        if op is not None and op.namespace not in ("aten", "prims"):
            self.ops.append(op)
        return func(*args, **(kwargs or {}))


def names_an_op(fn) -> bool:
    """Whether a plain callable's own code names a registered op: a global or closure value that is one, or
    ``torch.ops`` (``inspect.unwrap`` first; a callable without Python code names none)."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    scope = getattr(fn, "__globals__", {})
    values = [scope.get(n) for n in code.co_names] + [c.cell_contents for c in fn.__closure__ or ()]
    return "ops" in code.co_names or any(registered_op(v) is not None for v in values)


def wrapped_op(fn, t: dict, out_dtype) -> Optional[Any]:
    """The first registered custom op outside ``aten`` a plain callable ``fn`` calls on the operands ``t`` (a wrapper
    such as vLLM's ``ops.cutlass_scaled_mm`` over ``torch.ops._C``; one eager call), None when it calls none or
    raises (judged where the cases call it)."""
    calls = _CustomOpCalls()
    try:
        with calls:
            serving.call(fn, t, out_dtype)
    except Exception:  # noqa: BLE001 -- reported where the kernel is judged, not here
        return None
    return calls.ops[0] if calls.ops else None


def fake_difference(op, t: dict, out_dtype, real: torch.Tensor) -> Optional[str]:
    """None when ``op``'s fake output on fake copies of ``t`` has ``real``'s shape, dtype and strides, else one
    line (the fake raising included: no fake implementation)."""
    from torch._subclasses.fake_tensor import FakeTensorMode  # torch's only fake-tensor entry (no public one)

    try:
        with FakeTensorMode() as mode:
            fake = {k: None if v is None else mode.from_tensor(v) for k, v in t.items()}
            out = serving.call(op, fake, out_dtype)
    except Exception as e:  # noqa: BLE001 -- a fake that raises (or is missing) is the finding
        return f"fake implementation raised {serving.exception_line(e)}"
    got = (tuple(out.shape), out.dtype, tuple(out.stride()))
    want = (tuple(real.shape), real.dtype, tuple(real.stride()))
    if got != want:
        return f"fake output shape/dtype/strides {got} != the real output's {want}"
    return None


def opcheck_failures(op, t: dict, out_dtype) -> list[str]:
    """``["test_faketensor: <first line>", ...]``: the :data:`OPCHECK_TESTS` ``torch.library.opcheck`` fails."""
    args = (t["a"], t["b"], t["scale_a"], t["scale_b"])
    try:
        res = torch.library.opcheck(
            op, args, {"out_dtype": out_dtype, "bias": t["bias"]}, test_utils=OPCHECK_TESTS, raise_exception=False
        )
    except Exception as e:  # noqa: BLE001 -- opcheck itself refusing the op is a finding too
        return [f"opcheck raised {serving.exception_line(e)}"]
    return [
        f"{k}: {str(v).splitlines()[0][:300] if str(v) else type(v).__name__}" for k, v in res.items() if v != "SUCCESS"
    ]


@contextlib.contextmanager
def quiet_dynamo():
    """Dynamo's graph-break log lines and tracing warnings silenced while C14 compiles (a graph break is legal for a
    plain callable; the bits decide): the ``torch._dynamo`` logger at ERROR, its UserWarnings ignored; restored after."""
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\._dynamo")
            yield
    finally:
        logger.setLevel(level)


def _eager(spec, ops, device: str) -> tuple:
    """``(label, operands on device, the eager output, None)``; when the call raises, the last is its failing row."""
    label = serving.case_label(ops)
    t = serving.on_device(ops, device)
    try:
        return label, t, serving.call(serving.kernel_fn(spec, ops), t, ops.out_dtype), None
    except Exception as e:  # noqa: BLE001 -- the kernel's own failure, reported
        row = {"case": label, "ok": False, "kind": "raised", "line": f"eager call raised {serving.exception_line(e)}"}
        return label, t, None, row


@dataclass(frozen=True)
class Traced:
    """The custom op a compiled model traces: ``op`` a registered custom op (its fake read on it, ``opcheck`` run),
    or for a wrapper (a plain callable over one, ``inner`` that op's name) the kernel's callable itself, through
    which the fake is read (no opcheck: ``opcheck`` takes an op)."""

    op: Any
    inner: Optional[str] = None

    @property
    def wrapper(self) -> bool:
        return self.inner is not None

    def fake_target(self, fn: Callable) -> Any:
        """What the fake is read through, ``fn`` the case's kernel callable (``serving.kernel_fn``)."""
        return fn if self.wrapper else self.op

    def __str__(self) -> str:
        return f"{self.inner} (called by the kernel)" if self.wrapper else str(self.op)


def compile_case(spec, ops, device: str, traced: Optional[Traced], fake_and_opcheck: bool = True) -> dict:
    """One case: ``{"case", "ok", "line", ...}``, compiled with ``fullgraph`` when ``traced`` (a custom op is
    called); with ``fake_and_opcheck`` also ``fake`` and ``opcheck`` (a wrapper: ``n/a``)."""
    label, t, eager, raised = _eager(spec, ops, device)
    if raised is not None:
        return raised
    fn, dt = serving.kernel_fn(spec, ops), ops.out_dtype
    torch.compiler.reset()
    compiled = torch.compile(
        lambda a, b, sa, sb, bias: fn(a, b, sa, sb, out_dtype=dt, bias=bias),
        fullgraph=traced is not None,
        options={"compile_threads": 1},  # no pool of compile processes for one small graph
    )
    try:
        with quiet_dynamo():
            got = compiled(t["a"], t["b"], t["scale_a"], t["scale_b"], t["bias"])
    except Exception as e:  # noqa: BLE001 -- a compile / trace that fails is the finding
        # a custom op's wrong or missing fake is the usual cause: said first, in its own words
        fake = None
        if traced is not None and isinstance(eager, torch.Tensor):
            fake = fake_difference(traced.fake_target(fn), t, dt, eager)
        line = f"torch.compile raised {serving.exception_line(e)}"
        return {"case": label, "ok": False, "kind": "compile", "line": f"{fake}; {line}" if fake else line}
    finally:
        torch.compiler.reset()
    row: dict[str, Any] = {"case": label, "ok": True, "fullgraph": traced is not None}
    problems = []
    diff = serving.bit_difference(got, eager)
    if diff is not None:
        problems.append(f"compiled call: {diff}")
    if traced is not None and fake_and_opcheck and isinstance(eager, torch.Tensor):
        fake = fake_difference(traced.fake_target(fn), t, dt, eager)
        failures = [] if traced.wrapper else opcheck_failures(traced.op, t, dt)
        row.update(fake=fake or "agrees", opcheck="n/a: a wrapper" if traced.wrapper else failures or "all passed")
        problems += [fake] if fake else []
        problems += [f"opcheck {f}" for f in failures]
    row.update(ok=not problems, line="; ".join(problems) or "compiled call bit-identical to the eager call")
    return row


def fake_case(spec, ops, device: str, traced: Traced) -> dict:
    """``traced``'s fake on one case, no compile: ``{"case", "ok", "line", "fake"}``."""
    label, t, real, raised = _eager(spec, ops, device)
    if raised is not None:
        return raised
    target = traced.fake_target(serving.kernel_fn(spec, ops))
    fake = fake_difference(target, t, ops.out_dtype, real) if isinstance(real, torch.Tensor) else None
    return {
        "case": label,
        "ok": fake is None,
        "kind": "kernel",
        "fake": fake or "agrees",
        "line": fake or "fake agrees",
    }


def check_compile(spec, cases: Sequence = (), device: Optional[str] = None, seed: int = 0) -> CheckResult:
    """C14 (module docstring) for ``spec`` on ``device`` (None: where the kernel runs); ``cases`` (the suite's) are
    not used. Evidence: ``custom_op`` (its name or None), ``cases`` (``case``, ``ok``, ``line`` each)."""
    dev, why = pick_device(spec, device)
    if dev is None:
        return not_applicable(CHECK_ID, f"not runnable here: {why}")
    op = registered_op(spec.scaled_mm)
    traced = None if op is None else Traced(op)
    on_cpu = torch.device(dev).type == "cpu"
    sample = None
    if op is None and names_an_op(spec.scaled_mm):  # called once to see which op it calls (no call otherwise)
        sample = serving.sample_cases(spec, seed)
        first = sample[0]
        inner = wrapped_op(serving.kernel_fn(spec, first), serving.on_device(first, dev), first.out_dtype)
        # a plain callable over a custom op: a compiled model sees that op's fake through it
        traced = None if inner is None else Traced(spec.scaled_mm, inner)
    if on_cpu and traced is None:
        return not_applicable(CHECK_ID, CPU_REASON)
    sample = sample or serving.sample_cases(spec, seed)
    if on_cpu and traced is not None and traced.wrapper:  # its fake on the whole sample, no compile (CI minutes)
        compiled, faked = [], sample
    elif on_cpu:
        m, dt = CPU_SHAPE
        compiled, faked = [serving.make_operands(spec, m, dt, True, True, seed, f"serving/cpu-M{m}")], sample
    else:
        compiled, faked = sample[: serving.CORE], sample[serving.CORE :]
    rows = [compile_case(spec, ops, dev, traced, i == 0) for i, ops in enumerate(compiled)]
    if traced is not None:  # the fake on the rest of the sample (a fake may be wrong for one out dtype or path only)
        rows += [fake_case(spec, ops, dev, traced) for ops in faked]
    named, inner = (None, None) if traced is None else (str(traced), traced.inner)
    ev: dict[str, Any] = {"custom_op": named, "cases": rows, "device": dev}
    bad = [r for r in rows if not r["ok"]]
    if bad:
        kind = "raised" if all(r.get("kind") == "raised" for r in bad) else "kernel"
        whose = f"custom op {inner}, called by the kernel: " if inner else ""
        line = f"{bad[0]['case']}: {whose}{bad[0]['line']}"
        line += f" ({len(bad)} of {len(rows)} cases)" if len(bad) > 1 else ""
        return CheckResult(CHECK_ID, NAME, Verdict.FAIL, line, dict(ev, failure_kind=kind))
    if not compiled:
        line = f"the fake of custom op {inner}, called by the kernel, agrees on {len(rows)} case(s) on {dev}"
        line += " (not compiled on the CPU: C14 compiles it on CUDA)"
        return CheckResult(CHECK_ID, NAME, Verdict.PASS, line, ev)
    if traced is None:
        how = "fullgraph=False"
    elif traced.wrapper:
        how = f"a wrapper of custom op {traced.inner}, fullgraph, its fake agrees"
    else:
        how = f"custom op {traced.op}, fullgraph, fake and opcheck agree"
    more = f"; the fake agrees on {len(rows) - len(compiled)} more" if traced is not None else ""
    return CheckResult(
        CHECK_ID,
        NAME,
        Verdict.PASS,
        f"torch.compile ({how}): bit-identical on {len(compiled)} case(s) on {dev}{more}",
        ev,
    )
