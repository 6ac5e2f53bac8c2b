"""The epilogue language (DESIGN.md section 3): step lists and the standard contracts, which are named step lists.

A W8A8 kernel computes ``Y = rnd((A @ W.T) * s_a * s_w [+ bias])``; the exact integer accumulation leaves two correct
kernels free to differ only in the epilogue. An :class:`EpilogueSteps` says what one does, step by step; an
:class:`EpilogueContract` names one of the six standard step lists (scale order x bias point).
:func:`reference.epilogue.apply_steps` evaluates both. Grammar (one string per step, or one ``;``-separated string)::

    cast <dtype> [rne|rtz]             round the current value to <dtype>
    mul <operand> [-> <dtype>]         current * operand, result dtype (default: current)
    add bias [-> <dtype>]              current + bias (skipped without a bias)
    fma <operand> bias|0 [-> <dtype>]  current * operand + (bias or +0.0), ONE rounding (C ``fmaf``)
    fma <operand> bias? [-> <dtype>]   the same with a bias; without one a plain ``mul`` (a -0 product stays -0)
    <dtype>   := fp32 | bf16 | fp16 | out      (``out`` = the call's out_dtype)
    <operand> := a product of s_a | s_w | <number> | bf16(..) | fp16(..) | fp32(..), e.g. (s_a*127)*(s_w*127)

The first step casts the integer accumulator; the last is a ``cast`` to the call's out_dtype (or a bias step in the
dtype of an earlier cast). Bad descriptions raise a one-line :class:`~reference.errors.ContractError`."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Mapping, Optional, Union, overload

import torch

from reference.errors import ContractError

SCALE_ORDERS = ("a_then_w", "w_then_a", "fused")
BIAS_POINTS = ("fp32_before_round", "after_round")
ROUNDINGS = ("rne",)  # legal contract roundings; a ``cast`` step may also say ``rtz``

#: step dtype names -> torch dtypes (``out`` resolves to the call's out_dtype).
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "out": None}
STEP_ROUNDINGS = ("rne", "rtz")
_NAMES = ("s_a", "s_w")
_FP32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class Step:
    """One parsed step: ``op`` is ``cast`` | ``mul`` | ``add_bias`` | ``fma``; ``dtype`` a :data:`DTYPES` name or None
    (the current dtype); ``operand`` the expression text of ``mul``/``fma``; ``rounding`` is ``rne``/``rtz`` for
    ``cast`` and the addend (``bias`` or ``0``) for ``fma``; ``text`` the normalized step."""

    op: str
    dtype: Optional[str] = None
    operand: str = ""
    rounding: str = "rne"
    text: str = ""


def _err(i: int, text: str, why: str) -> ContractError:
    return ContractError(f"epilogue step {i + 1} {text!r}: {why}")


def _check_operand(expr: str, i: int, text: str) -> None:
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
            # 1e999 parses as inf, and 1e39 becomes inf as float32
            if not math.isfinite(float(node.value)) or abs(float(node.value)) > _FP32_MAX:
                raise _err(i, text, f"constant {node.value!r} is not a finite float32 number")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            walk(node.operand)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("bf16", "fp16", "fp32")
            and len(node.args) == 1
            and not node.keywords
        ):
            walk(node.args[0])
        else:
            raise _err(i, text, f"operand {expr!r}: only '*', s_a, s_w, numbers and bf16()/fp16()/fp32() are allowed")

    walk(tree)


def _split_result(rest: str, i: int, text: str) -> tuple[str, Optional[str]]:
    if "->" not in rest:
        return rest.strip(), None
    body, _, dt = rest.partition("->")
    dt = dt.strip()
    if dt not in DTYPES:
        raise _err(i, text, f"result dtype {dt!r} is not one of {list(DTYPES)}")
    return body.strip(), dt


def parse_step(text: str, i: int = 0) -> Step:
    """Parse one step string (``i``: its 0-based position, for the message); ContractError when malformed."""
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
        if rnd not in STEP_ROUNDINGS:
            raise _err(i, text, f"rounding {rnd!r} is not one of {list(STEP_ROUNDINGS)}")
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
        if addend not in ("bias", "bias?", "0") or not expr.strip():
            raise _err(i, text, "expected 'fma <operand> bias|bias?|0 [-> dtype]'")
        _check_operand(expr.strip(), i, text)
        return Step("fma", dt, expr.strip(), addend, t)
    raise _err(i, text, f"unknown step {op!r} (use cast, mul, add bias, fma)")


@dataclass(frozen=True)
class EpilogueSteps:
    """A parsed, validated step list (``steps``: :class:`Step` tuple) with an optional label ``name``."""

    steps: tuple
    name: str = ""

    def to_list(self) -> list[str]:
        """The step strings (JSON-able; :func:`parse_steps` reads them back)."""
        return [s.text for s in self.steps]

    def to_dict(self) -> dict:
        return {"name": self.name, "steps": self.to_list()}

    def label(self) -> str:
        return self.name or "; ".join(self.to_list())

    def standard(self) -> Optional["EpilogueContract"]:
        """The standard contract whose step list these steps are (the same step texts), else None."""
        texts = self.to_list()
        for key, st in NAMED.items():
            if st.to_list() == texts:
                order, bias_point = key.split("/")
                return EpilogueContract(order, bias_point)
        return None

    def nearest_contract(self) -> EpilogueContract:
        """The standard contract closest in structure (C5/C6 need only a scale order and a bias point): bias
        ``after_round`` when no ``cast`` follows ``add bias``; scale order from the first ``mul``/``fma`` operand naming
        one scale (``s_a`` first -> ``a_then_w``), ``fused`` when an operand names both."""
        order, bias_point = "a_then_w", "fp32_before_round"
        ops = [s.op for s in self.steps]
        if "add_bias" in ops and "cast" not in ops[ops.index("add_bias") + 1 :]:
            bias_point = "after_round"
        named = [h for s in self.steps if s.op in ("mul", "fma") for h in [[n for n in _NAMES if n in s.operand]] if h]
        if any(len(h) == 2 for h in named):
            order = "fused"
        elif named:
            order = "a_then_w" if named[0][0] == "s_a" else "w_then_a"
        return EpilogueContract(order, bias_point, "rne")


@dataclass(frozen=True)
class EpilogueContract:
    """A standard epilogue: the name of one step list (:attr:`steps`). Every multiply/add is IEEE float32 RNE.

    ``scale_order``: ``a_then_w`` ``(x * s_a) * s_w``; ``w_then_a`` ``(x * s_w) * s_a``; ``fused`` ``x * (s_a * s_w)``
    (combined scale rounded once), with ``x`` the accumulator cast to float32 (one RNE). ``bias_point``:
    ``fp32_before_round`` adds the float32-widened bias before the one rounding to out_dtype; ``after_round`` rounds
    first, then adds the bias in out_dtype arithmetic (float32 add, rounded again). ``rounding``: only ``rne``. The bias
    of a contract call must have the out_dtype. Raises ContractError on an unknown field value."""

    scale_order: str = "a_then_w"
    bias_point: str = "fp32_before_round"
    rounding: str = "rne"

    def __post_init__(self) -> None:
        for key, legal in (("scale_order", SCALE_ORDERS), ("bias_point", BIAS_POINTS), ("rounding", ROUNDINGS)):
            if getattr(self, key) not in legal:
                raise ContractError(f"{key}={getattr(self, key)!r} is not one of {legal}")

    @property
    def steps(self) -> EpilogueSteps:
        """The named step list (:data:`NAMED` ``"<scale_order>/<bias_point>"``)."""
        return NAMED[f"{self.scale_order}/{self.bias_point}"]

    def to_dict(self) -> dict:
        """Plain dict for JSON reports (built by hand: ``dataclasses.asdict`` deep-copies)."""
        return {"scale_order": self.scale_order, "bias_point": self.bias_point, "rounding": self.rounding}

    @classmethod
    def from_dict(cls, d: dict) -> "EpilogueContract":
        """Inverse of :meth:`to_dict`; unknown keys raise ContractError."""
        unknown = set(d) - {"scale_order", "bias_point", "rounding"}
        if unknown:
            raise ContractError(f"unknown epilogue contract field(s): {sorted(unknown)}")
        return cls(**d)

    def label(self) -> str:
        """e.g. ``a_then_w/bias:fp32_before_round/rne``."""
        return f"{self.scale_order}/bias:{self.bias_point}/{self.rounding}"


def parse_steps(desc, name: str = "") -> EpilogueSteps:
    """An :class:`EpilogueSteps` from itself, an :class:`EpilogueContract` (its step list), a list of step strings, one
    ``;``-separated string, or a :data:`NAMED` key. ContractError (one line) on a bad step or a description that does
    not start with a ``cast`` and end in the output dtype."""
    if isinstance(desc, EpilogueSteps):
        return desc
    if isinstance(desc, EpilogueContract):
        return desc.steps
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
            f"must end in the output dtype: a final 'cast <dtype>' (or a bias step in the dtype of an earlier cast)"
        )
    return EpilogueSteps(steps, name)


def from_contract(contract: EpilogueContract) -> EpilogueSteps:
    """The step list a standard contract names: ``cast fp32``, then ``mul s_a; mul s_w`` / ``mul s_w; mul s_a`` /
    ``mul s_a*s_w``, then ``add bias; cast out`` (fp32_before_round) or ``cast out; add bias`` (after_round).
    ContractError when ``contract`` is not an EpilogueContract."""
    if not isinstance(contract, EpilogueContract):
        raise ContractError(f"from_contract needs an EpilogueContract, got {type(contract).__name__}")
    muls = {"a_then_w": ["mul s_a", "mul s_w"], "w_then_a": ["mul s_w", "mul s_a"], "fused": ["mul s_a*s_w"]}
    tail = ["add bias", "cast out"] if contract.bias_point == "fp32_before_round" else ["cast out", "add bias"]
    return parse_steps(
        ["cast fp32", *muls[contract.scale_order], *tail], name=f"{contract.scale_order}/{contract.bias_point}"
    )


#: The six standard contracts as named step lists (``"<scale_order>/<bias_point>"``).
NAMED: dict[str, EpilogueSteps] = {
    f"{o}/{b}": from_contract(EpilogueContract(o, b)) for o in SCALE_ORDERS for b in BIAS_POINTS
}

# vLLM's cutlass_scaled_mm (ScaledEpilogue[Bias]): per-channel scale, then per-token, bias in float32, one rounding.
CUTLASS_STYLE = EpilogueContract("w_then_a", "fp32_before_round", "rne")
# vLLM's Triton scaled_mm: per-token scale, then per-channel, cast to out_dtype, then ``+ bias`` in out_dtype.
TRITON_STYLE = EpilogueContract("a_then_w", "after_round", "rne")

StepsDecl = Union[EpilogueSteps, Mapping[str, EpilogueSteps]]


@overload
def parse_declared(desc: Mapping) -> dict[str, EpilogueSteps]: ...
@overload
def parse_declared(desc: object) -> Union[EpilogueSteps, dict[str, EpilogueSteps]]: ...
def parse_declared(desc: object) -> Union[EpilogueSteps, dict[str, EpilogueSteps]]:
    """A kernel's step declaration: one description, or a mapping from a selector (``"cpu"``, ``"cuda"``,
    ``"cuda/float16"``, ``"*"``) to a description (see :func:`select_steps`). ContractError when bad."""
    if isinstance(desc, Mapping):
        if not desc:
            raise ContractError("empty per-device epilogue mapping")
        out: dict[str, EpilogueSteps] = {}
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
    """The description for a call on ``device`` with ``out_dtype``: a mapping is searched for ``"<device>/<dtype>"``,
    ``"<device>"``, ``"*/<dtype>"``, ``"*"``; None when nothing matches or ``decl`` is None."""
    if decl is None or isinstance(decl, EpilogueSteps):
        return decl
    key = select_key(decl, device, out_dtype)
    return None if key is None else decl[key]


def select_key(decl: Mapping, device: Optional[str], out_dtype: torch.dtype) -> Optional[str]:
    """The key of a selector mapping :func:`select_steps` takes for ``device`` / ``out_dtype``, or None."""
    dev = str(device or "cpu").split(":")[0]
    dt = str(out_dtype).replace("torch.", "")
    for key in (f"{dev}/{dt}", dev, f"*/{dt}", "*"):
        if key in decl:
            return key
    return None


def declared_to_dict(decl) -> Optional[dict]:
    """JSON-able form of a declaration (None stays None)."""
    if decl is None or isinstance(decl, EpilogueSteps):
        return decl and decl.to_dict()
    return {k: v.to_dict() for k, v in decl.items()}


def steps_label(steps: EpilogueSteps) -> str:
    """``name: step; step; ...`` for reports."""
    body = "; ".join(steps.to_list())
    return f"{steps.name}: {body}" if steps.name else body


_NARROW = ("bf16", "fp16")
_OUT_NAMES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


def _constants(expr: str) -> list:
    """The numbers and the names rounded by bf16()/fp16() in an operand ``expr`` (a valid one)."""
    consts, rounded = [], []

    def walk(node, inside) -> None:
        if isinstance(node, ast.BinOp):
            walk(node.left, inside)
            walk(node.right, inside)
        elif isinstance(node, ast.Call):
            for a in node.args:
                walk(a, inside or (node.func.id if node.func.id in _NARROW else None))
        elif isinstance(node, ast.Name) and inside:
            rounded.append((node.id, inside))
        elif isinstance(node, ast.UnaryOp):
            consts.append(-float(node.operand.value))
        elif isinstance(node, ast.Constant):
            consts.append(float(node.value))

    walk(ast.parse(expr, mode="eval").body, None)
    return consts, rounded


def interchangeability_problems(steps: EpilogueSteps, out_dtype: Optional[str] = None) -> list[str]:
    """Why ``steps`` give other bits than every standard contract on some legal input, decided from the steps
    alone: one line per reason, [] when none is found (a standard contract gives []). ``out_dtype``: the call's
    dtype name (``bf16`` | ``fp16`` | ``fp32``) when the declaration is for one; None: any (``cast out`` is then
    narrow for the 16-bit out dtypes). Reasons: a rounding to bf16/fp16 (or to the out dtype) before the last scale
    is applied, a scale rounded to bf16/fp16, a ``rtz`` cast, an ``fma`` (one rounding of ``x*s + bias``; +0.0 added
    without a bias turns -0 into +0), a constant factor other than a power of two, a scale applied other than once,
    the bias added before the last scale or through a 16-bit format other than the out dtype."""
    if steps.standard() is not None:
        return []
    out: list[str] = []
    ss = steps.steps
    scale_at = [i for i, s in enumerate(ss) if s.op in ("mul", "fma") and any(n in s.operand for n in _NAMES)]
    last_scale = scale_at[-1] if scale_at else -1
    counts = {n: 0 for n in _NAMES}
    for i, s in enumerate(ss):
        where = f"step {i + 1} {s.text!r}"
        dt = s.dtype if s.dtype != "out" else (out_dtype or "out")
        narrow = dt in _NARROW or (dt == "out" and out_dtype is None)
        if s.op == "cast" and s.rounding == "rtz":
            out.append(f"{where} rounds toward zero (the reference rounds to nearest even)")
        if (s.op == "cast" or (s.dtype is not None and s.op != "add_bias")) and narrow and i < last_scale:
            what = "the out dtype (16-bit)" if dt == "out" else dt
            out.append(
                f"{where} rounds to {what} before the last scale is applied (a rounding the reference does not make)"
            )
        if s.op == "cast" and dt in _NARROW and out_dtype != dt and last_scale <= i < len(ss) - 1:
            other = f"the out dtype {out_dtype}" if out_dtype else f"the out dtype (unless it is {dt})"
            out.append(f"{where} rounds to {dt}, then to {other}: two roundings")
        if s.op in ("mul", "fma"):
            consts, rounded = _constants(s.operand)
            for n in _NAMES:
                counts[n] += s.operand.count(n)
            for name, fmt in rounded:
                out.append(f"{where} rounds {name} to {fmt} before using it")
            for c in consts:
                if c != 0 and abs(math.frexp(c)[0]) != 0.5:
                    out.append(
                        f"{where} multiplies by {c:g}, not a power of two (the reference scales by s_a and s_w only)"
                    )
                    break
        if s.op == "fma" and s.rounding == "bias?":
            out.append(f"{where} rounds x*s + bias once where the reference rounds the product first")
        elif s.op == "fma":
            out.append(
                f"{where} rounds x*s + {'bias' if s.rounding == 'bias' else '0'} once where the reference rounds the "
                "product first, and adds +0.0 when there is no bias (-0 becomes +0)"
            )
        if s.op == "add_bias" and i < last_scale:
            out.append(f"{where} adds the bias before the last scale is applied")
        if s.op == "add_bias" and s.dtype in _NARROW and out_dtype not in (None, s.dtype):
            out.append(f"{where} rounds the biased value to {s.dtype}, not to the out dtype {out_dtype}")
    for n, c in counts.items():
        if c != 1:
            out.append(f"{n} is applied {c} times (the reference applies it once)")
    return out


def declaration_problems(decl) -> list[str]:
    """:func:`interchangeability_problems` of a declaration (one step list, or a selector mapping: each line then
    starts with its selector, e.g. ``cuda/float16: step 3 ...``); [] for None."""
    if decl is None:
        return []
    if isinstance(decl, EpilogueSteps):
        return interchangeability_problems(decl)
    out = []
    for key, st in decl.items():
        dt = _OUT_NAMES.get(f"torch.{key.partition('/')[2]}") if "/" in key else None
        out += [f"{key}: {line}" for line in interchangeability_problems(st, dt)]
    return out
