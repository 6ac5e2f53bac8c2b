"""Load third-party kernels: ``pkg.module:function[?query]`` and the ``int8conf.kernels`` entry-point group.

The loaded object is a KernelSpec, a zero-argument factory marked ``int8conf_factory = True``, or a callable that
declares its contract (:func:`declare`, ``fn.int8conf_*`` attributes, or the query keys of :data:`QUERY_KEYS`);
a callable without a contract is refused (KernelLoadError). A bad ``@declare`` does not break the module's import:
the function carries an :class:`InvalidDeclaration` and only loading it fails. Conventions: ``int8conf``
(``b`` int8 [N,K]) and ``vllm`` (``b`` [K,N] column-major, [M,1] / [N,1] scales; :func:`vllm_adapter`).
conformance/kernels/README.md has the user's guide."""

from __future__ import annotations

import faulthandler
import functools
import importlib
import importlib.metadata
import inspect
import os
import signal
import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Optional, Union
from urllib.parse import parse_qs

import torch

from conformance.kernels.digest import callable_digest
from conformance.kernels.spec import (
    BUILTINS,
    OVERFLOW_BEHAVIOURS,
    KernelSpec,
    ShapeConstraints,
    check_operands,
    parse_declared_accumulator,
)
from reference.asymmetric import parse_azp_declaration
from reference.block.contract import parse_block_declaration
from reference.contract import (
    CUTLASS_STYLE,
    TRITON_STYLE,
    EpilogueContract,
    EpilogueSteps,
    from_contract,
    parse_declared,
    parse_steps,
    select_key,
)
from reference.errors import ContractError, KernelLoadError, first_line
from reference.validate import OUT_DTYPES

ENTRY_POINT_GROUP = "int8conf.kernels"
CONVENTIONS = ("int8conf", "vllm")


@dataclass(frozen=True)
class KernelDeclaration:
    """What a third-party callable declares (``fn.int8conf``); fields as :class:`KernelSpec`,
    plus ``convention`` (``"int8conf"`` or ``"vllm"``); ``accumulator`` already parsed."""

    contract: EpilogueContract
    devices: tuple = ("cpu",)
    constraints: ShapeConstraints = ShapeConstraints()
    int_mm: Optional[Callable] = None
    convention: str = "int8conf"
    name: str = ""
    version: str = "0"
    description: str = ""
    steps: Optional[object] = None
    contiguous_only: object = False
    overflow: str = "wrap"
    warm_up: Union[bool, Callable] = False
    operands: str = "int8"
    accumulator: object = None
    block: object = None
    azp: object = None
    #: the declared fields a ``?query`` on the kernel's name replaced (named in its description and its name)
    overridden: tuple = ()
    #: what they declared, one text each (``overridden``'s order), for the description
    declared_before: tuple = ()


def block_contract(block) -> EpilogueContract:
    """The standard contract a block-scaled kernel's reports name: the one nearest its declared epilogue
    (its bias point; the scales entered per K-block)."""
    return parse_block_declaration(block).epilogue.nearest_contract()


def _contract_and_steps(contract) -> tuple:
    """``(EpilogueContract, steps or None)``: a step list / mapping / ``;``-joined string
    declares steps (and its nearest standard contract); anything else goes through :func:`parse_contract`."""
    if isinstance(contract, dict) and "scale_order" not in contract:
        # a per-device mapping may name contracts too: {"cpu": "triton", "cuda": [steps...]}
        contract = {k: _named_contract_steps(v) or v for k, v in contract.items()}
    if isinstance(contract, (list, tuple, EpilogueSteps, dict)) and not (
        isinstance(contract, dict) and "scale_order" in contract
    ):
        steps = parse_declared(contract)
        first = steps if isinstance(steps, EpilogueSteps) else next(iter(steps.values()))
        return first.nearest_contract(), steps
    if isinstance(contract, str) and ";" in contract:
        steps = parse_steps(contract)
        return steps.nearest_contract(), steps
    return parse_contract(contract), None


def _named_contract_steps(v):
    """The step list of a per-device mapping value naming a contract, else None."""
    if not isinstance(v, (EpilogueContract, str)) or (isinstance(v, str) and ";" in v):
        return None
    try:
        return from_contract(parse_contract(v))
    except ContractError:
        return None


def _flag(value):
    """``contiguous_only`` from a bool, a query string (1/0, true/false, yes/no, or a comma list of operand
    names) or operand names: True / False or a tuple of names. Raises ContractError otherwise."""
    names = ("a", "b", "scale_a", "scale_b", "bias")
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("1", "true", "yes", "on", ""):
            return True
        if v in ("0", "false", "no", "off"):
            return False
        value = [x.strip() for x in v.split(",") if x.strip()]
    try:
        ops = tuple(sorted(set(value)))
    except TypeError:
        raise ContractError(f"contiguous_only={value!r}: expected a boolean or operand names {names}") from None
    bad = [o for o in ops if o not in names]
    if bad or not ops:
        raise ContractError(f"contiguous_only={value!r}: expected a boolean or operand names {names}")
    return ops


def _warm_up(value) -> Union[bool, Callable]:
    """``warm_up``: a function naming a call's compiled variant (``KernelSpec.warm_up``) as it is, else :func:`_bool`."""
    return value if callable(value) else _bool(value)


def _bool(value) -> bool:
    """A yes/no declaration from a bool or 1/0, true/false, yes/no, on/off. Raises ContractError otherwise."""
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ContractError(f"expected true or false, got {value!r}")


def _overflow(value):
    """``overflow`` declaration: one of ``OVERFLOW_BEHAVIOURS``, or a mapping device type -> one of them
    (``KernelSpec.overflow``); ContractError otherwise."""
    if isinstance(value, Mapping):
        return {str(d).strip().lower(): _overflow(v) for d, v in value.items()}
    v = str(value).strip().lower()
    if v not in OVERFLOW_BEHAVIOURS:
        raise ContractError(f"overflow={value!r} is not one of {OVERFLOW_BEHAVIOURS}")
    return v


def parse_contract(value) -> EpilogueContract:
    """EpilogueContract from a contract, dict, ``"cutlass"``, ``"triton"`` or
    ``"<scale_order>/<bias_point>"``; ContractError otherwise."""
    if isinstance(value, EpilogueContract):
        return value
    if isinstance(value, dict):
        return EpilogueContract.from_dict(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("cutlass", "cutlass_style"):
            return CUTLASS_STYLE
        if v in ("triton", "triton_style"):
            return TRITON_STYLE
        parts = v.split("/")
        if len(parts) == 2:
            return EpilogueContract(parts[0], parts[1])
    raise ContractError(
        f"cannot read an epilogue contract from {value!r} (use 'cutlass', 'triton' or '<scale_order>/<bias_point>')"
    )


@dataclass(frozen=True)
class InvalidDeclaration:
    """A :func:`declare` with wrong arguments, attached instead of a :class:`KernelDeclaration`
    so the module still imports; ``problems``: ``((field, one-line message), ...)``."""

    problems: tuple

    def describe(self, fn) -> str:
        """One line: ``@declare(...) on function 'f' (module m): field=value: why; ...``."""
        where = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
        mod = getattr(fn, "__module__", None)
        return f"@declare(...) on function {where!r}{f' (module {mod})' if mod else ''}: " + "; ".join(
            msg for _, msg in self.problems
        )


def declare(
    contract=None,
    devices=("cpu",),
    constraints: Optional[ShapeConstraints] = None,
    int_mm: Optional[Callable] = None,
    convention: str = "int8conf",
    name: str = "",
    version: str = "0",
    description: str = "",
    contiguous_only=False,
    overflow: str = "wrap",
    warm_up: Union[bool, Callable] = False,
    operands: str = "int8",
    accumulator=None,
    block=None,
    azp=None,
) -> Callable:
    """Decorator attaching a :class:`KernelDeclaration` as ``fn.int8conf``; invalid arguments attach an
    :class:`InvalidDeclaration` instead (loading then raises KernelLoadError naming function and field).
    ``block``: a block-scaled kernel's declaration (``reference.block.contract.parse_block_declaration``); its
    ``contract`` may then be left out (the standard contract nearest its epilogue stands for it in reports).
    ``azp``: an asymmetric-activation kernel's declaration (``reference.asymmetric.parse_azp_declaration``:
    ``"per-token"``, ``"per-tensor"`` or both); its calls then get ``azp_adj=`` and ``azp=``."""
    problems: list[tuple[str, str]] = []
    values: dict = {}

    def field(key: str, value, parse) -> None:
        try:
            values[key] = parse(value)
        except ContractError as e:
            msg = first_line(e, limit=None)
            problems.append((key, msg if f"{key}=" in msg else f"{key}={value!r}: {msg}"))
        except Exception as e:  # noqa: BLE001 -- any parse failure of a user value is one line
            problems.append((key, f"{key}={value!r}: {type(e).__name__}: {first_line(e, limit=None)}"))

    def _conv(v):
        if v not in CONVENTIONS:
            raise ContractError(f"convention={v!r} is not one of {CONVENTIONS}")
        return v

    def _cons(v):
        if v is not None and not isinstance(v, ShapeConstraints):
            raise ContractError(f"constraints={v!r}: expected a ShapeConstraints")
        return v or ShapeConstraints()

    field("block", block, lambda v: None if v is None else parse_block_declaration(v))
    field("azp", azp, lambda v: None if v is None else parse_azp_declaration(v))
    if block is not None and contract is not None:
        problems.append(
            ("contract", "contract= with block=: a block-scaled kernel's epilogue is its block declaration's")
        )
    elif block is not None:  # a bad block declaration is its own problem; a good one gives the contract
        if "block" in values:
            values["contract"] = (block_contract(values["block"]), None)
    else:
        field("contract", contract, _contract_and_steps)
    field("devices", devices, lambda v: _devices(v, f"devices={v!r}"))
    field("constraints", constraints, _cons)
    field("convention", convention, _conv)
    field("contiguous_only", contiguous_only, _flag)
    field("overflow", overflow, _overflow)
    field("warm_up", warm_up, _warm_up)
    field("accumulator", accumulator, parse_declared_accumulator)
    if not any(k in ("accumulator", "devices") for k, _ in problems):

        def _operands(v):
            check_operands(v, values["accumulator"], values["devices"])
            return v

        field("operands", operands, _operands)
    decl: InvalidDeclaration | KernelDeclaration
    if problems:
        decl = InvalidDeclaration(tuple(problems))
    else:
        cont, steps = values.pop("contract")
        decl = KernelDeclaration(
            cont, int_mm=int_mm, name=name, version=version, description=description, steps=steps, **values
        )

    def wrap(fn: Callable) -> Callable:
        fn.int8conf = decl  # type: ignore[attr-defined]  # the declaration rides on the function as an attribute
        return fn

    return wrap


def vllm_adapter(fn: Callable) -> Callable:
    """Wrap ``fn(a, b[K,N], scale_a[M,1], scale_b[N,1], out_dtype, bias)`` into the int8conf
    convention: ``b.t()`` is passed as a [K,N] column-major view (a copy when ``b`` is itself a transposed view),
    scales reshaped to float32 columns, values unchanged. An asymmetric call (``azp_adj=``, ``azp=``) is made as
    vLLM's ``cutlass_scaled_mm_azp(a, b, scale_a, scale_b, out_dtype, azp_adj=, azp=, bias=)`` (_custom_ops.py:798)."""

    @functools.wraps(fn)
    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, **zero_point):
        m, n = a.shape[0], b.shape[0]
        sa = scale_a.reshape(-1)
        sb = scale_b.reshape(-1)
        sa = (sa.expand(m) if sa.numel() == 1 else sa).reshape(m, 1).contiguous()
        sb = (sb.expand(n) if sb.numel() == 1 else sb).reshape(n, 1).contiguous()
        bt = b.t()
        if bt.dim() == 2 and bt.shape[0] > 1 and bt.stride(0) != 1:
            # b came as the transposed view of a [K, N] buffer: b.t() is then
            # row-major, and CUTLASS-style kernels need [K, N] column-major
            bt = b.contiguous().t()
        if zero_point:
            return fn(a, bt, sa, sb, out_dtype, bias=bias, **zero_point)
        return fn(a, bt, sa, sb, out_dtype, bias)

    scaled_mm.int8conf_adapted = "vllm"  # type: ignore[attr-defined]  # a marker attribute on the wrapper function
    return scaled_mm


def _declared_text(value) -> str:
    """A declared field's value as the description names it (a contract by its label)."""
    return value.label() if isinstance(value, EpilogueContract) else str(value)


def _declaration_from_attrs(obj, query: dict) -> Optional[KernelDeclaration]:
    decl = getattr(obj, "int8conf", None)
    if isinstance(decl, InvalidDeclaration):
        raise ContractError(decl.describe(obj))
    if isinstance(decl, KernelDeclaration):
        base = decl
    else:
        contract = query.get("contract", getattr(obj, "int8conf_contract", None))
        block = getattr(obj, "int8conf_block", None)
        if contract is None and block is None:
            return None
        if contract is not None and block is not None:
            raise ContractError("contract with block: a block-scaled kernel's epilogue is its block declaration's")
        cons = getattr(obj, "int8conf_constraints", None)
        if isinstance(cons, dict):
            cons = ShapeConstraints(**cons)
        if contract is None:
            block = parse_block_declaration(block)
            contract, attr_steps = block_contract(block), None
        else:
            contract, attr_steps = _contract_and_steps(contract)
        base = KernelDeclaration(
            contract=contract,
            steps=attr_steps,
            devices=_devices(getattr(obj, "int8conf_devices", ("cpu",)), "int8conf_devices"),
            constraints=cons or ShapeConstraints(),
            int_mm=getattr(obj, "int8conf_int_mm", None),
            convention=getattr(obj, "int8conf_convention", "int8conf"),
            name=getattr(obj, "int8conf_name", ""),
            version=str(getattr(obj, "int8conf_version", "0")),
            description=getattr(obj, "int8conf_description", ""),
            contiguous_only=_flag(getattr(obj, "int8conf_contiguous_only", False)),
            overflow=_overflow(getattr(obj, "int8conf_overflow", "wrap")),
            warm_up=_warm_up(getattr(obj, "int8conf_warm_up", False)),
            operands=getattr(obj, "int8conf_operands", "int8"),
            accumulator=parse_declared_accumulator(getattr(obj, "int8conf_accumulator", None)),
            block=block,
            azp=getattr(obj, "int8conf_azp", None),
        )
    over = {}
    if "contract" in query:
        over["contract"], over["steps"] = _contract_and_steps(query["contract"])
    parse = {"devices": lambda v: _devices([d for d in v.split(",") if d], "?devices="), "contiguous_only": _flag}
    parse.update(overflow=_overflow, warm_up=_warm_up, accumulator=parse_declared_accumulator)
    for key in QUERY_KEYS[1:]:
        if key in query:
            over[key] = parse[key](query[key]) if key in parse else query[key]
    if isinstance(getattr(obj, "int8conf", None), KernelDeclaration):  # said in the report's header
        over["overridden"] = tuple(k for k in over if k != "steps" and over[k] != getattr(base, k))
        over["declared_before"] = tuple(_declared_text(getattr(base, k)) for k in over["overridden"])
    decl = replace(base, **over)
    if decl.convention not in CONVENTIONS:
        raise ContractError(f"convention={decl.convention!r} is not one of {CONVENTIONS}")
    check_operands(decl.operands, decl.accumulator, decl.devices)
    if isinstance(decl.steps, dict):
        # a device the mapping does not name would be checked against the contract nearest
        # to its first entry: a silent guess
        keys = [k.split("/")[0] for k in decl.steps]
        missing = [d for d in decl.devices if d not in keys and "*" not in keys]
        if missing:
            raise ContractError(
                f"the per-device epilogue names {sorted(decl.steps)} but not the declared device(s) {missing}: add an entry for each (or '*'), or declare devices={tuple(sorted(set(keys)))}"
            )
        holes = [
            f"{d}/{str(t).replace('torch.', '')}"
            for d in decl.devices
            for t in OUT_DTYPES
            if select_key(decl.steps, d, t) is None
        ]
        if holes:
            raise ContractError(
                f"the per-device epilogue names {sorted(decl.steps)} but nothing for {', '.join(holes)}: add an entry for each (or '<device>' / '*')"
            )
    return decl


class DeclarationWarning(UserWarning):
    """A loaded kernel's declared epilogue can never be interchangeable with the reference (C5 / C6 will fail
    where it differs, saying the declaration is to blame); warned once per kernel and declaration."""


_WARNED: set = set()


def warn_declaration(spec: KernelSpec) -> None:
    """Warn (:class:`DeclarationWarning`, one line) when ``spec``'s declaration can never be interchangeable with
    the reference (``KernelSpec.declaration_problems``: decided from the steps alone); once per process for the same
    kernel name, origin and reasons."""
    problems = spec.declaration_problems()
    key = (spec.name, spec.origin, tuple(problems))
    if not problems or key in _WARNED:
        return
    _WARNED.add(key)
    more = f" (and {len(problems) - 1} more: the report lists them)" if len(problems) > 1 else ""
    warnings.warn(
        DeclarationWarning(
            f"kernel {spec.name!r}: its declared epilogue can never be interchangeable with the reference: "
            f"{problems[0]}{more}; C8 holds the kernel to it, C5 / C6 will fail where it differs and name the "
            "declaration"
        ),
        stacklevel=3,
    )


#: how the runner calls each entry, per convention: ``(text shown, positional count, keyword names)``
_CALLS = {
    ("scaled_mm", "int8conf"): ("(a, b, scale_a, scale_b, out_dtype=..., bias=None)", 4, ("out_dtype", "bias")),
    ("scaled_mm", "vllm"): ("(a, b, scale_a, scale_b, out_dtype, bias)", 6, ()),
    ("int_mm", "int8conf"): ("(a, b)", 2, ()),
    ("scaled_mm_block", "int8conf"): (
        "(a, b, scale_a, scale_b, out_dtype=..., bias=None, block_size=(block_n, block_k))",
        4,
        ("out_dtype", "bias", "block_size"),
    ),
    ("scaled_mm_azp", "int8conf"): (
        "(a, b, scale_a, scale_b, out_dtype=..., bias=None, azp_adj=..., azp=None)",
        4,
        ("out_dtype", "bias", "azp_adj", "azp"),
    ),
    ("scaled_mm_azp", "vllm"): (
        "(a, b, scale_a, scale_b, out_dtype, azp_adj=..., azp=None, bias=None)",
        5,
        ("azp_adj", "azp", "bias"),
    ),
}


def check_callable(fn: Callable, name: str, entry: str = "scaled_mm", convention: str = "int8conf") -> None:
    """Refuse ``fn`` (KernelLoadError, one line) when its signature cannot take the call the runner makes
    (:data:`_CALLS`: ``scaled_mm(a, b, scale_a, scale_b, out_dtype=..., bias=None)``, the vLLM convention's six
    positional arguments, ``int_mm(a, b)``); a callable without an inspectable signature (a C extension) passes."""
    shown, n_pos, keywords = _CALLS[(entry, "int8conf" if entry == "int_mm" else convention)]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*range(n_pos), **{k: None for k in keywords})
    except TypeError as e:
        raise KernelLoadError(
            f"kernel {name!r}: {entry.split('_block')[0].split('_azp')[0]} cannot be called as {shown}: its signature "
            f"is {sig} ({e})"
        ) from None


def _checked(spec: KernelSpec, name: str, convention: str = "int8conf") -> KernelSpec:
    """``spec`` after :func:`check_callable` on its entries (the raw callable of a vLLM-convention kernel)."""
    raw = getattr(spec.scaled_mm, "__wrapped__", spec.scaled_mm) if convention == "vllm" else spec.scaled_mm
    entry = "scaled_mm_azp" if spec.azp is not None else "scaled_mm_block" if spec.block is not None else "scaled_mm"
    if entry == "scaled_mm_block" and convention == "vllm":
        raise KernelLoadError(f"kernel {name!r}: a block-scaled kernel takes the int8conf convention (block_size=)")
    check_callable(raw, name, entry, convention)
    if spec.int_mm is not None:
        check_callable(spec.int_mm, name, "int_mm")
    return spec


def spec_from_object(obj, name: str, origin: str, query: Optional[dict] = None) -> KernelSpec:
    """A KernelSpec from a loaded object (module docstring). Raises KernelLoadError: not a spec,
    factory or declared callable, a bad declaration, an entry its signature does not let the runner call
    (:func:`check_callable`), or a reserved name."""
    query = query or {}
    try:
        if getattr(obj, "int8conf_factory", False) and callable(obj):
            obj = obj()
        if isinstance(obj, KernelSpec):
            if query:  # a spec's declaration is its own: a query would be silently ignored
                raise KernelLoadError(
                    f"kernel {name!r} is a KernelSpec, whose declaration is its own: ?{'&'.join(query)}= cannot change "
                    "it (drop the query, or name a declared callable)"
                )
            spec = replace(obj, origin=origin, source_digest=obj.source_digest or callable_digest(obj.scaled_mm))
            return _checked(_own_name(spec, name), name)
        if not callable(obj):
            raise KernelLoadError(
                f"kernel {name!r}: {type(obj).__name__} object is neither a KernelSpec nor a callable"
            )
        decl = _declaration_from_attrs(obj, query)
    except ContractError as e:
        raise KernelLoadError(f"kernel {name!r}: bad declaration: {e}") from None
    except KernelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 -- a user factory failing must be one line
        raise KernelLoadError(
            f"kernel {name!r}: factory raised {type(e).__name__}: {first_line(e, limit=None)}"
        ) from None
    if decl is None:
        raise KernelLoadError(
            f"kernel {name!r} declares no epilogue contract: decorate it with conformance.kernels.loader.declare(...), set fn.int8conf_contract, or append '?contract=cutlass|triton|<order>/<bias_point>' to the name"
        )
    fn = vllm_adapter(obj) if decl.convention == "vllm" else obj
    same = (
        "contract",
        "devices",
        "constraints",
        "version",
        "int_mm",
        "steps",
        "contiguous_only",
        "overflow",
        "warm_up",
        "operands",
        "accumulator",
        "block",
        "azp",
    )
    desc = decl.description or f"{origin} ({decl.convention} convention)"
    label = decl.name or name
    if decl.overridden:
        was = ", ".join(f"{k} ({v})" for k, v in zip(decl.overridden, decl.declared_before))
        desc += f"; the name's query overrides the declared {was}"
    declared = isinstance(getattr(obj, "int8conf", None), KernelDeclaration)
    named_by_query = decl.overridden if declared else tuple(k for k in query if k != "name")
    if named_by_query and "name" not in query:  # its own report folder: another query's run is not replaced
        label += "?" + "&".join(f"{k}={query[k]}" for k in named_by_query)
    try:
        spec = KernelSpec(
            name=label,
            scaled_mm=fn,
            source_digest=callable_digest(obj),
            origin=origin,
            description=desc,
            **{f: getattr(decl, f) for f in same},
        )
    except ContractError as e:
        raise KernelLoadError(f"kernel {name!r}: bad declaration: {e}") from None
    spec = _checked(_own_name(spec, name), name, decl.convention)
    warn_declaration(spec)
    return spec


def _own_name(spec: KernelSpec, loaded_as: str) -> KernelSpec:
    """``spec`` unless it declares a built-in's name or ``all`` (KernelLoadError)."""
    if spec.name in BUILTINS or spec.name == "all":
        whose = "the built-in kernel" if spec.name != "all" else "every kernel"
        raise KernelLoadError(
            f"kernel {loaded_as!r} declares the name {spec.name!r}, which is reserved for {whose}: its reports would replace reports/check/{spec.name}/; declare another name (declare(name=...) or ?name=)"
        )
    return spec


QUERY_KEYS = (
    "contract",
    "convention",
    "devices",
    "name",
    "version",
    "contiguous_only",
    "overflow",
    "warm_up",
    "operands",
    "accumulator",
)


def split_query(name: str) -> tuple[str, dict]:
    """``"pkg.mod:fn?contract=cutlass"`` -> ``("pkg.mod:fn", {"contract": "cutlass"})``; ContractError
    for a key outside ``QUERY_KEYS`` or given twice."""
    if "?" not in name:
        return name, {}
    base, q = name.split("?", 1)
    parsed = parse_qs(q, keep_blank_values=True)
    twice = sorted(k for k, v in parsed.items() if len(v) > 1)
    if twice:
        raise ContractError(f"kernel {base!r}: query key(s) {twice} given more than once")
    query = {k: v[0] for k, v in parsed.items()}
    unknown = sorted(set(query) - set(QUERY_KEYS))
    if unknown:
        raise ContractError(f"kernel {base!r}: unknown query key(s) {unknown}; expected some of {QUERY_KEYS}")
    return base, query


def _devices(value, where: str) -> tuple:
    """Declared device types, each one torch knows (a single string is one device: ``"cpu"`` = ``("cpu",)``);
    ContractError when empty or unknown."""
    devs = (value,) if isinstance(value, str) else tuple(value)
    if not devs:
        raise ContractError(f"{where}: devices is empty; declare e.g. ('cpu',) or ('cuda',)")
    for d in devs:
        try:
            torch.device(d)
        except (RuntimeError, TypeError):
            raise ContractError(f"{where}: device {d!r} is not a torch device type (e.g. 'cpu', 'cuda')") from None
    return devs


def load_module_function(name: str, option: str = "--kernel") -> KernelSpec:
    """Load ``pkg.module:attr[.attr...][?query]``; KernelLoadError (one line, naming
    ``option``) when the module, attribute or declaration is wrong."""
    base, query = split_query(name)
    # the origin keeps a ?query: a fresh process (a reproducer, a warm-up worker) resolves the same declaration
    origin = f"module:{name.strip()}" if query else f"module:{base}"
    return spec_from_object(import_module_object(name, option), base, origin, query)


def undeclared_callable(name: str, option: str = "--kernel"):
    """The object ``pkg.module:attr`` names when it is a plain callable declaring nothing (no ``declare``, no
    ``int8conf_*`` attribute, no ``?query``): what a caller using only an accumulator ``(a, b) -> int32`` may
    take as is; None for any other name or object. Raises KernelLoadError (one line) when it cannot import it."""
    base, query = split_query(name)
    if query or ":" not in base or not base.partition(":")[0]:
        return None
    obj = import_module_object(name, option)
    if isinstance(obj, KernelSpec) or not callable(obj) or getattr(obj, "int8conf_factory", False):
        return None
    return obj if getattr(obj, "int8conf", None) is None and _declaration_from_attrs(obj, {}) is None else None


def is_file_path(name: str) -> bool:
    """Whether kernel name (or module part) ``name`` is a file path: it ends in ``.py`` or holds a path separator."""
    return name.endswith(".py") or "/" in name or os.sep in name


def file_path_hint(option: str, path: str, attr: Optional[str] = None) -> str:
    """The one line a kernel named by a file path (``dir/file.py:function``, or ``dir/file.py`` with no function:
    ``attr`` None) gets: the accepted form, a module name with its directory on PYTHONPATH, spelled out for this
    file (``FUNCTION`` standing for the function not given)."""
    p = Path(path)
    stem = p.name[: -len(".py")] if p.name.endswith(".py") else p.name
    given = path if attr is None else f"{path}:{attr}"
    return (
        f"{option} '{given}': a file path is not a kernel name: give 'module:function' with the module's "
        f"directory on PYTHONPATH (here: PYTHONPATH={p.parent} ... {option} {stem}:{attr or 'FUNCTION'})"
    )


def import_module_object(name: str, option: str = "--kernel"):
    """The object ``pkg.module:attr[.attr...][?query]`` names (not yet a kernel); KernelLoadError (one line,
    naming ``option``) when the module or attribute is wrong."""
    base, _ = split_query(name)
    mod_name, _, attr = base.partition(":")
    if not mod_name or not attr:
        raise KernelLoadError(f"{option} {name!r}: expected 'pkg.module:function'")
    if is_file_path(mod_name):
        raise KernelLoadError(file_path_hint(option, mod_name, attr))
    ended = import_ends_process(mod_name)
    if ended is not None:
        raise KernelLoadError(
            f"{option} {name!r}: importing module {mod_name!r} ended the process ({ended}) before it returned: "
            "a module-level os._exit or a crash at import"
        )
    try:
        mod = importlib.import_module(mod_name)
    except SystemExit as e:  # a module that exits while imported must not end int8conf with its own status
        raise KernelLoadError(
            f"{option} {name!r}: module {mod_name!r} called sys.exit({e.code!r}) while being imported"
        ) from None
    except Exception as e:  # noqa: BLE001 -- import errors of any kind become one line
        # the module itself (or its package) is missing, not a failing import inside it
        missing = (
            isinstance(e, ModuleNotFoundError) and e.name is not None and (mod_name + ".").startswith(e.name + ".")
        )
        hint = " (is its directory on PYTHONPATH? run from it or set PYTHONPATH)" if missing else ""
        raise KernelLoadError(
            f"{option} {name!r}: cannot import module {mod_name!r}: {type(e).__name__}: {first_line(e, limit=None)}{hint}"
        ) from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise KernelLoadError(f"{option} {name!r}: module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def import_ends_process(mod_name: str) -> Optional[str]:
    """How importing ``mod_name`` ends the process (``exit status N`` / ``signal SIGSEGV``), tried first in a forked
    child whose output is discarded: a module-level ``os._exit`` or a crash would end int8conf silently. None when
    the child's import returns or raises (the caller's own import reports that), the module is imported already,
    or there is no fork."""
    if mod_name in sys.modules or not hasattr(os, "fork"):
        return None
    r, w = os.pipe()
    with warnings.catch_warnings():  # a heartbeat thread may run: the child only imports, then leaves
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            faulthandler.disable()  # its dump would go to the parent's stderr
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            importlib.import_module(mod_name)
        except BaseException:  # noqa: BLE001, S110 -- an import that raises returned: the parent's import reports it
            pass
        os.write(w, b"1")
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        returned = f.read(1) == b"1"
    _, status = os.waitpid(pid, 0)
    if returned:
        return None
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"


def entry_point_names() -> list[str]:
    """Names in the ``int8conf.kernels`` entry-point group."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})


def load_entry_point(name: str) -> Optional[KernelSpec]:
    """Load entry point ``name`` (None if absent); KernelLoadError when it fails to load or declare."""
    base, query = split_query(name)
    eps = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == base]
    if not eps:
        return None
    try:
        obj = eps[0].load()
    except Exception as e:  # noqa: BLE001 -- a plugin's import may raise anything: one KernelLoadError line
        raise KernelLoadError(
            f"entry point {base!r} ({eps[0].value}) failed to load: {type(e).__name__}: {first_line(e, limit=None)}"
        ) from None
    return spec_from_object(obj, base, f"entry-point:{base}", query)


def cwd_on_sys_path(directory=None) -> None:
    """Put ``directory`` (default: the current one) first on ``sys.path`` once, as ``python -m``
    does, so ``--kernel=mod:fn`` finds ``mod.py`` also under the console scripts."""
    cwd = os.path.abspath(directory if directory is not None else os.getcwd())
    if not any(p in ("", cwd) or (p and os.path.abspath(p) == cwd) for p in sys.path):
        sys.path.insert(0, cwd)
