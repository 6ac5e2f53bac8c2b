"""A declarative epilogue description: an ordered list of steps.

The three scale orders x two bias points of :class:`reference.contract.EpilogueContract`
cannot say what several real kernels do: a bf16 rounding between the two
scale multiplies (torchao's W8A8 linear), the accumulator cast to the
scale's dtype (torchao ``int_scaled_matmul`` with bf16 scales), a constant
factor (bitsandbytes' ``1/127**2``), a fused multiply-add (bitsandbytes'
CUDA dequant). An :class:`EpilogueSteps` is an ordered list of steps, each a
short string, evaluated by :func:`apply_steps` with exact IEEE semantics.

Grammar (one string per step; a whole description may also be one string
with steps separated by ``;``)::

    cast <dtype> [rne|rtz]        round the current value to <dtype>
    mul <operand> [-> <dtype>]    current * operand, result dtype (default: current)
    add bias [-> <dtype>]         current + bias, result dtype (default: current)
    fma <operand> bias|0 [-> <dtype>]  fused: current * operand + (bias or +0.0), ONE rounding
    <dtype>   := fp32 | bf16 | fp16 | out     (``out`` = the call's out_dtype)
    <operand> := a Python-syntax product of  s_a | s_w | <number> | bf16(..) | fp16(..) | fp32(..)
                 e.g.  s_a   s_a*s_w   (s_a*127)*(s_w*127)   6.200124e-05   bf16(s_a)

Semantics (every rounding is IEEE 754; ``rne`` = roundTiesToEven):

* The value starts as the exact integer accumulator; the first step must be
  a ``cast``. Casting the accumulator to fp32 is one RNE rounding (exact for
  ``|acc| <= 2**24``, :func:`reference.epilogue.acc_to_fp32`); to bf16/fp16
  it goes through fp32 first, as torch's ``int32.to(bfloat16)`` does
  (c10 converts int -> float -> bf16), identical to a direct rounding while
  ``|acc| <= 2**24`` (precondition C4).
* Every value is held as float32 (bf16/fp16 values widen exactly) tagged
  with its dtype. ``mul`` / ``add`` compute one IEEE float32 operation
  (RNE), then round the float32 result to the result dtype if it is bf16 /
  fp16 -- torch's "opmath" semantics for bf16/fp16 elementwise ops on CPU
  and CUDA (compute in float, round once to the tensor's dtype).
* Operands: ``s_a`` per-token float32 ``[M, 1]``, ``s_w`` per-channel
  float32 ``[1, N]``; numbers are rounded to float32 (RNE) as torch does
  with a Python-float scalar; every ``*`` inside an operand is one float32
  RNE multiply (left to right, parentheses respected); ``bf16(x)`` /
  ``fp16(x)`` / ``fp32(x)`` round x to that dtype.
* ``add bias`` with no bias in the call is skipped; ``fma c bias`` with no
  bias, and ``fma c 0``, add ``+0.0`` (as bitsandbytes' kernel does). ``fma`` rounds
  ``x * c + b`` once to float32 (C ``fmaf``), computed exactly here.
* The last step must be a ``cast``; at evaluation its dtype must equal the
  call's ``out_dtype``.

The built-in contracts are named instances (:data:`NAMED`,
:func:`from_contract`) and give the same bits as
:func:`reference.epilogue.apply_epilogue` (tests/reference/test_epilogue_steps.py).
Bad descriptions raise :class:`~reference.errors.ContractError` with one line.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Mapping, Optional, Union

import torch

from reference.bits import ieee_subnormals, round_fp32
from reference.contract import SCALE_ORDERS, EpilogueContract
from reference.errors import ContractError, OperandError

#: step dtype names -> torch dtypes (``out`` resolves to the call's out_dtype).
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "out": None}
ROUNDINGS = ("rne", "rtz")
_ROUNDERS = ("bf16", "fp16", "fp32")
_NAMES = ("s_a", "s_w")
_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True)
class Step:
    """One parsed step.

    Attributes:
        op: ``cast`` | ``mul`` | ``add_bias`` | ``fma``.
        dtype: target / result dtype name (``fp32``, ``bf16``, ``fp16``,
            ``out``) or None (= the current dtype; ``mul``/``add``/``fma`` only).
        operand: the operand expression text (``mul`` / ``fma``), else "".
        rounding: ``rne`` or ``rtz`` for ``cast`` (arithmetic is RNE); for
            ``fma`` the addend, ``bias`` or ``0``.
        text: the normalized step text.
    """

    op: str
    dtype: Optional[str] = None
    operand: str = ""
    rounding: str = "rne"
    text: str = ""


_FP32_MAX = 3.4028234663852886e38  # float32's largest finite value


def _err(i: int, text: str, why: str) -> ContractError:
    return ContractError(f"epilogue step {i + 1} {text!r}: {why}")


def _check_operand(expr: str, i: int, text: str) -> ast.AST:
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        raise _err(i, text, f"operand {expr!r} is not a product of s_a, s_w, numbers, bf16()/fp16()/fp32()") from None

    def walk(node) -> None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            walk(node.left)
            walk(node.right)
        elif isinstance(node, ast.Name):
            if node.id not in _NAMES:
                raise _err(i, text, f"unknown operand name {node.id!r} (use s_a, s_w)")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise _err(i, text, f"constant {node.value!r} is not a number")
            # 1e999 parses as inf, and 1e39 becomes inf as float32: a constant must be finite there
            if not math.isfinite(float(node.value)) or abs(float(node.value)) > _FP32_MAX:
                raise _err(i, text, f"constant {node.value!r} is not a finite float32 number")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            walk(node.operand)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ROUNDERS
            and len(node.args) == 1
            and not node.keywords
        ):
            walk(node.args[0])
        else:
            raise _err(i, text, f"operand {expr!r}: only '*', s_a, s_w, numbers and bf16()/fp16()/fp32() are allowed")

    walk(tree)
    return tree


def _split_result(rest: str, i: int, text: str) -> tuple[str, Optional[str]]:
    if "->" not in rest:
        return rest.strip(), None
    body, _, dt = rest.partition("->")
    dt = dt.strip()
    if dt not in DTYPES:
        raise _err(i, text, f"result dtype {dt!r} is not one of {list(DTYPES)}")
    return body.strip(), dt


def parse_step(text: str, i: int = 0) -> Step:
    """Parse one step string (grammar in the module docstring).

    Raises:
        ContractError: one line naming the step, its position and the problem.
    """
    if not isinstance(text, str):
        raise ContractError(f"epilogue step {i + 1} must be a string, got {type(text).__name__}")
    t = " ".join(text.strip().split())
    if not t:
        raise _err(i, text, "empty step")
    op, _, rest = t.partition(" ")
    op = op.lower()
    if op == "cast":
        parts = rest.split()
        if not parts or len(parts) > 2:
            raise _err(i, text, "expected 'cast <fp32|bf16|fp16|out> [rne|rtz]'")
        if parts[0] not in DTYPES:
            raise _err(i, text, f"dtype {parts[0]!r} is not one of {list(DTYPES)}")
        rnd = parts[1] if len(parts) == 2 else "rne"
        if rnd not in ROUNDINGS:
            raise _err(i, text, f"rounding {rnd!r} is not one of {list(ROUNDINGS)}")
        return Step("cast", parts[0], "", rnd, f"cast {parts[0]}" + (f" {rnd}" if rnd != "rne" else ""))
    if op == "mul":
        body, dt = _split_result(rest, i, text)
        if not body:
            raise _err(i, text, "expected 'mul <operand> [-> dtype]'")
        _check_operand(body, i, text)
        return Step("mul", dt, body, "rne", t)
    if op == "add":
        body, dt = _split_result(rest, i, text)
        if body != "bias":
            raise _err(i, text, "only 'add bias [-> dtype]' is an add step")
        return Step("add_bias", dt, "", "rne", t)
    if op == "fma":
        body, dt = _split_result(rest, i, text)
        expr, _, addend = body.rpartition(" ")
        if addend not in ("bias", "0") or not expr.strip():
            raise _err(i, text, "expected 'fma <operand> bias|0 [-> dtype]'")
        _check_operand(expr.strip(), i, text)
        return Step("fma", dt, expr.strip(), addend, t)
    raise _err(i, text, f"unknown step {op!r} (use cast, mul, add bias, fma)")


@dataclass(frozen=True)
class EpilogueSteps:
    """A parsed, validated epilogue description.

    Attributes:
        steps: the parsed :class:`Step` tuple.
        name: optional label (the built-in instances are named after their
            contract label, e.g. ``a_then_w/fp32_before_round``).
    """

    steps: tuple
    name: str = ""

    def to_list(self) -> list[str]:
        """The step strings (JSON-able; :func:`parse_steps` reads them back)."""
        return [s.text for s in self.steps]

    def to_dict(self) -> dict:
        """``{"name": ..., "steps": [...]}`` for reports."""
        return {"name": self.name, "steps": self.to_list()}

    def label(self) -> str:
        """Short label: the name, else the steps joined by ``; ``."""
        return self.name or "; ".join(self.to_list())

    def nearest_contract(self) -> EpilogueContract:
        """The standard :class:`EpilogueContract` closest in structure (used
        by C5/C6, which only need a scale order and a bias point): bias
        ``after_round`` when no ``cast`` follows the ``add bias`` step (the
        bias is added in the output dtype), else ``fp32_before_round``; scale order from the first ``mul`` whose
        operand names exactly one scale (``s_a`` first -> ``a_then_w``),
        ``fused`` when one operand names both."""
        order, bias_point = "a_then_w", "fp32_before_round"
        ops = [s.op for s in self.steps]
        if "add_bias" in ops and "cast" not in ops[ops.index("add_bias") + 1 :]:
            bias_point = "after_round"
        names = []
        for s in self.steps:
            if s.op in ("mul", "fma"):
                has = [n for n in _NAMES if n in s.operand]
                if len(has) == 2:
                    order = "fused"
                    break
                if has:
                    names.append(has[0])
        if order != "fused" and names:
            order = "a_then_w" if names[0] == "s_a" else "w_then_a"
        return EpilogueContract(order, bias_point, "rne")


def parse_steps(desc, name: str = "") -> EpilogueSteps:
    """Parse a description.

    Args:
        desc: an :class:`EpilogueSteps` (returned as is), a list/tuple of
            step strings, one string with steps separated by ``;``, or the
            name of a built-in instance (:data:`NAMED`).
        name: label for the result.

    Raises:
        ContractError: one line: the offending step, its position, the problem;
            or a description that does not start and end with a ``cast``.
    """
    if isinstance(desc, EpilogueSteps):
        return desc
    if isinstance(desc, str):
        if desc.strip() in NAMED:
            return NAMED[desc.strip()]
        items = [p for p in desc.split(";") if p.strip()]
    elif isinstance(desc, (list, tuple)):
        items = list(desc)
    else:
        raise ContractError(
            f"an epilogue description must be a list of step strings or one "
            f"';'-separated string, got {type(desc).__name__}"
        )
    if not items:
        raise ContractError("empty epilogue description: give at least 'cast <dtype>'")
    steps = tuple(parse_step(t, i) for i, t in enumerate(items))
    if steps[0].op != "cast":
        raise ContractError(
            f"epilogue step 1 {steps[0].text!r}: the first step must cast the integer accumulator (e.g. 'cast fp32')"
        )
    if steps[-1].op != "cast" and not (
        steps[-1].op in ("add_bias", "fma") and steps[-1].dtype is None and any(s.op == "cast" for s in steps[1:])
    ):
        raise ContractError(
            f"epilogue step {len(steps)} {steps[-1].text!r}: the description "
            f"must end in the output dtype: a final 'cast <dtype>' (or a bias "
            f"step in the dtype of an earlier cast)"
        )
    return EpilogueSteps(steps, name)


# --------------------------------------------------------------------- evaluation


def _resolve(dt: Optional[str], current: torch.dtype, out_dtype: torch.dtype) -> torch.dtype:
    if dt is None:
        return current
    return out_dtype if dt == "out" else DTYPES[dt]


def _round_to(x32: torch.Tensor, dtype: torch.dtype, mode: str = "rne") -> torch.Tensor:
    """float32 -> dtype (RNE/RTZ) -> back to float32 (exact widening)."""
    if dtype == torch.float32:
        return x32
    return round_fp32(x32, dtype, mode).to(torch.float32)


def _eval_operand(node, sa: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    if isinstance(node, ast.BinOp):
        return _eval_operand(node.left, sa, sw) * _eval_operand(node.right, sa, sw)
    if isinstance(node, ast.Name):
        return sa if node.id == "s_a" else sw
    if isinstance(node, ast.Constant):
        return torch.tensor(float(node.value), dtype=torch.float64).to(torch.float32)
    if isinstance(node, ast.UnaryOp):
        return -_eval_operand(node.operand, sa, sw)
    # bf16()/fp16()/fp32() rounding call
    return _round_to(_eval_operand(node.args[0], sa, sw).to(torch.float32), DTYPES[node.func.id])


def _fma_fp32(x: torch.Tensor, c: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IEEE ``fmaf(x, c, b)``: ``x*c + b`` rounded once to float32 (RNE).

    x, c, b are float32 values. ``x*c`` is exact in float64 (24+24 <= 53
    significand bits); the float64 sum is rounded *to odd* (TwoSum gives the
    error; an inexact result with an even last bit moves one float64 ulp
    toward the exact value), and round-to-odd with 29 spare bits followed by
    one float64 -> float32 RNE equals a single RNE of the exact sum
    (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums:
    proved algorithms using rounding to odd", IEEE TC 2008).
    """
    x64, c64, b64 = (t.to(torch.float64) for t in torch.broadcast_tensors(x, c, b))
    p = x64 * c64
    s = p + b64
    bb = s - p
    err = (p - (s - bb)) + (b64 - bb)
    bits = s.view(torch.int64)
    even = (bits & 1) == 0
    fix = (err != 0) & even & torch.isfinite(s)
    toward = torch.where(err > 0, torch.full_like(s, float("inf")), torch.full_like(s, float("-inf")))
    s = torch.where(fix, torch.nextafter(s, toward), s)
    return s.to(torch.float32)


def apply_steps(
    acc: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    steps,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Evaluate an epilogue description bit for bit.

    Args:
        acc: int32 / int64 [M, N] exact accumulator.
        scale_a: float32 per-token scale [M], [M, 1] or scalar.
        scale_b: float32 per-channel scale [N], [N, 1] or scalar.
        steps: an :class:`EpilogueSteps` or anything :func:`parse_steps` reads.
        bias: None or an [N] tensor (any float dtype; widened exactly to float32).
        out_dtype: torch.bfloat16, torch.float16 or torch.float32.

    Returns:
        Tensor [M, N] of ``out_dtype`` (module docstring gives the semantics).

    Raises:
        ContractError: bad description, or its final dtype is not ``out_dtype``.
        OperandError: bad acc / scales / bias / out_dtype.
    """
    from reference.epilogue import acc_to_fp32
    from reference.validate import OUT_DTYPES, normalize_scales

    desc = parse_steps(steps)
    if out_dtype not in OUT_DTYPES:
        raise OperandError(f"out_dtype={out_dtype} is not one of torch.bfloat16, torch.float16, torch.float32")
    x = acc_to_fp32(acc)
    if x.dim() != 2:
        raise OperandError(f"acc must be 2-D [M,N], got shape {tuple(acc.shape)}")
    m, n = (int(s) for s in x.shape)
    for s, nm in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
            raise OperandError(f"{nm} must be a float32 tensor, got {getattr(s, 'dtype', type(s).__name__)}")
    sa, sw = normalize_scales(scale_a, scale_b, m, n)
    sa = sa.to(x.device).reshape(m, 1)
    sw = sw.to(x.device).reshape(1, n)
    bf = None
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or not bias.is_floating_point() or tuple(bias.shape) != (n,):
            raise OperandError(
                f"bias must be a float [{n}] tensor, got "
                f"{getattr(bias, 'dtype', type(bias).__name__)} "
                f"{tuple(getattr(bias, 'shape', ()))}"
            )
        bf = bias.to(x.device).to(torch.float32).reshape(1, n)  # exact widening
    with ieee_subnormals():
        cur = torch.float32
        val = x
        for st in desc.steps:
            if st.op == "cast":
                cur = _resolve(st.dtype, cur, out_dtype)
                val = _round_to(val, cur, st.rounding)
            elif st.op == "mul":
                opnd = _eval_operand(ast.parse(st.operand, mode="eval").body, sa, sw)
                cur = _resolve(st.dtype, cur, out_dtype)
                val = _round_to(val * opnd, cur)
            elif st.op == "add_bias":
                cur = _resolve(st.dtype, cur, out_dtype)
                if bf is not None:
                    val = _round_to(val + bf, cur)
                else:
                    val = _round_to(val, cur)
            else:  # fma
                opnd = _eval_operand(ast.parse(st.operand, mode="eval").body, sa, sw)
                b = bf if (bf is not None and st.rounding == "bias") else torch.zeros((), dtype=torch.float32)
                cur = _resolve(st.dtype, cur, out_dtype)
                val = _round_to(_fma_fp32(val, opnd, b), cur)
        if cur != out_dtype:
            raise ContractError(
                f"epilogue {desc.label()!r} ends in {_DTYPE_NAMES[cur]} but the call asked "
                f"for out_dtype {out_dtype}: end it with 'cast out' (or the call's dtype)"
            )
        return val.to(out_dtype) if out_dtype != torch.float32 else val.clone()


# --------------------------------------------------------------------- named instances


def from_contract(contract: EpilogueContract) -> EpilogueSteps:
    """The step list equal (bit for bit) to a built-in :class:`EpilogueContract`.

    ``a_then_w``: ``mul s_a; mul s_w``; ``w_then_a``: ``mul s_w; mul s_a``;
    ``fused``: ``mul s_a*s_w``. Bias ``fp32_before_round``: ``add bias``
    then ``cast out``; ``after_round``: ``cast out`` then ``add bias`` (in
    out_dtype arithmetic, as reference.epilogue).

    Raises:
        ContractError: not an EpilogueContract.
    """
    if not isinstance(contract, EpilogueContract):
        raise ContractError(f"from_contract needs an EpilogueContract, got {type(contract).__name__}")
    muls = {"a_then_w": ["mul s_a", "mul s_w"], "w_then_a": ["mul s_w", "mul s_a"], "fused": ["mul s_a*s_w"]}[
        contract.scale_order
    ]
    tail = ["add bias", "cast out"] if contract.bias_point == "fp32_before_round" else ["cast out", "add bias"]
    return parse_steps(["cast fp32", *muls, *tail], name=f"{contract.scale_order}/{contract.bias_point}")


#: The six built-in contracts as named step lists (``"<scale_order>/<bias_point>"``).
NAMED: dict[str, EpilogueSteps] = {}
for _o in SCALE_ORDERS:
    for _b in ("fp32_before_round", "after_round"):
        NAMED[f"{_o}/{_b}"] = from_contract(EpilogueContract(_o, _b))


StepsDecl = Union[EpilogueSteps, Mapping[str, EpilogueSteps]]


def parse_declared(desc) -> Union[EpilogueSteps, dict]:
    """A kernel's step declaration: one description, or a mapping from a
    selector (``"cpu"``, ``"cuda"``, ``"cuda/float16"``, ``"*"``) to a
    description, for libraries whose code path differs by device or output
    dtype (see :func:`select_steps`).

    Raises:
        ContractError: a bad description or selector.
    """
    if isinstance(desc, Mapping):
        if not desc:
            raise ContractError("empty per-device epilogue mapping")
        out = {}
        for k, v in desc.items():
            dev, _, dt = str(k).partition("/")
            if dev not in ("*", "cpu", "cuda") or (dt and dt not in ("bfloat16", "float16", "float32")):
                raise ContractError(
                    f"epilogue selector {k!r}: use '*', 'cpu', 'cuda' or '<device>/<bfloat16|float16|float32>'"
                )
            out[str(k)] = parse_steps(v)
        return out
    return parse_steps(desc)


def select_steps(decl, device: str, out_dtype: torch.dtype) -> Optional[EpilogueSteps]:
    """The description that applies to a call on ``device`` with ``out_dtype``.

    Lookup order for a mapping: ``"<device>/<dtype>"``, ``"<device>"``,
    ``"*/<dtype>"``, ``"*"``; None when nothing matches (or ``decl`` is None).
    """
    if decl is None or isinstance(decl, EpilogueSteps):
        return decl
    dev = str(device or "cpu").split(":")[0]
    dt = str(out_dtype).replace("torch.", "")
    for key in (f"{dev}/{dt}", dev, f"*/{dt}", "*"):
        if key in decl:
            return decl[key]
    return None


def declared_to_dict(decl) -> Optional[dict]:
    """JSON-able form of a declaration (None stays None)."""
    if decl is None:
        return None
    if isinstance(decl, EpilogueSteps):
        return decl.to_dict()
    return {k: v.to_dict() for k, v in decl.items()}


def steps_label(steps: EpilogueSteps) -> str:
    """``name: step; step; ...`` for reports."""
    body = "; ".join(steps.to_list())
    return f"{steps.name}: {body}" if steps.name else body
