"""Load third-party kernels: ``pkg.module:function`` and the
``int8conf.kernels`` entry-point group.

How a third-party callable declares itself
------------------------------------------
The loaded object may be

1. a :class:`~conformance.kernels.spec.KernelSpec` (used as is; origin set), or
2. a zero-argument function marked ``fn.int8conf_factory = True`` returning a
   KernelSpec, or
3. a callable carrying a declaration, either via the :func:`declare`
   decorator::

       from conformance.kernels.loader import declare
       from reference.contract import CUTLASS_STYLE

       @declare(contract=CUTLASS_STYLE, devices=("cuda",),
                constraints=ShapeConstraints(min_m=17, k_multiple=16),
                int_mm=my_int_mm, convention="int8conf")
       def my_scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None): ...

   or, equivalently, plain attributes ``fn.int8conf_contract`` (an
   EpilogueContract, its dict, or ``"cutlass"`` / ``"triton"`` /
   ``"<scale_order>/<bias_point>"``), ``fn.int8conf_devices``,
   ``fn.int8conf_constraints`` (ShapeConstraints or dict), ``fn.int8conf_int_mm``,
   ``fn.int8conf_convention`` (``"int8conf"`` or ``"vllm"``), ``fn.int8conf_name``,
   ``fn.int8conf_version``, ``fn.int8conf_description``,
   ``fn.int8conf_contiguous_only``, ``fn.int8conf_overflow``.

What the accumulator does when a sum leaves int32 is declared with
``overflow="wrap"`` (default: two's-complement int32, what int32 hardware
adds do), ``"saturate"`` or ``"undefined"`` (``@declare(..., overflow=...)``,
``fn.int8conf_overflow`` or ``?overflow=saturate``); the checks compare such
elements with the declared behaviour (``conformance.checks.overflow``).

A kernel that needs dense operands declares ``contiguous_only=True``
(``@declare(..., contiguous_only=True)`` or ``?contiguous_only=1``; or only
some operands: ``contiguous_only=("b",)``, ``?contiguous_only=b``): the
suite then hands it contiguous copies of strided operands and its report
says which layouts were not covered. Without it the kernel must accept every
layout of the contract (row-major with leading stride >= K, ``b`` also as a
transposed [K, N] view, strided scales).

A bad ``@declare(...)`` argument does not break the module's import (which
would make every kernel of the module unloadable): the function carries an
:class:`InvalidDeclaration`, and loading it raises KernelLoadError naming
the function, the field and the value; the module's other kernels load.

A callable with no contract is refused (KernelLoadError): check C8 and the
reference emulation need the declared epilogue. For a callable you cannot
decorate (e.g. a compiled op), put the declaration in the name with a query
string: ``pkg.mod:fn?contract=cutlass&convention=vllm&devices=cuda``
(keys: contract, convention, devices (comma list), name, version,
contiguous_only (1/0), overflow (wrap/saturate/undefined)).

Calling conventions
-------------------
``int8conf`` (DESIGN section 3): ``fn(a int8[M,K], b int8[N,K], scale_a, scale_b,
out_dtype, bias)``. ``vllm``: ``fn(a int8[M,K], b int8[K,N], scale_a fp32[M,1],
scale_b fp32[N,1], out_dtype, bias)`` as vLLM's ``cutlass_scaled_mm`` /
``triton_scaled_mm``; :func:`vllm_adapter` passes ``b.t()`` -- a [K,N]
column-major view of the [N,K] row-major weight, the layout CUTLASS kernels
require -- and scales reshaped to columns (values unchanged).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys
from dataclasses import dataclass, replace
from typing import Callable, Optional
from urllib.parse import parse_qs

import torch

from conformance.kernels._digest import callable_digest
from conformance.kernels.spec import BUILTINS, OVERFLOW_BEHAVIOURS, KernelSpec, ShapeConstraints
from reference.contract import CUTLASS_STYLE, TRITON_STYLE, EpilogueContract
from reference.epilogue_steps import EpilogueSteps, from_contract, parse_declared
from reference.errors import ContractError, KernelLoadError, first_line

ENTRY_POINT_GROUP = "int8conf.kernels"
CONVENTIONS = ("int8conf", "vllm")


@dataclass(frozen=True)
class KernelDeclaration:
    """What a third-party callable declares (attached as ``fn.int8conf``).

    Attributes:
        contract: declared epilogue contract.
        devices: device types it runs on, e.g. ``("cuda",)``.
        constraints: native shape constraints.
        int_mm: optional accumulator-only entry ``(a int8[M,K], b int8[N,K]) -> int32[M,N]``.
        convention: ``"int8conf"`` or ``"vllm"`` (see module docstring).
        name, version, description: for the registry and reports.
        contiguous_only: the kernel needs dense operands: True (all) or a
            tuple of operand names (see module docstring).
        overflow: ``"wrap"`` | ``"saturate"`` | ``"undefined"`` (module docstring).
    """

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


def _contract_and_steps(contract) -> tuple:
    """``(EpilogueContract, steps or None)``: a step list / mapping / named
    step list (``reference.epilogue_steps``) declares steps, and its nearest
    standard contract; anything else goes through :func:`parse_contract`."""
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
        steps = parse_declared(contract)
        return steps.nearest_contract(), steps
    return parse_contract(contract), None


def _named_contract_steps(v):
    """The step list of a per-device mapping value that names a contract
    (``"cutlass"``, ``"triton"``, ``"<order>/<bias_point>"``, an
    EpilogueContract); None when the value is a step description."""
    if not isinstance(v, (EpilogueContract, str)) or (isinstance(v, str) and ";" in v):
        return None
    try:
        return from_contract(parse_contract(v))
    except ContractError:
        return None


def _flag(value):
    """``contiguous_only`` from a bool, a query string (1/0, true/false,
    yes/no, or a comma list of operand names) or an iterable of operand names.

    Returns:
        True / False, or a tuple of operand names.
    Raises:
        ContractError: anything else (unknown operand names included).
    """
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


def _overflow(value) -> str:
    """``overflow`` declaration: one of ``OVERFLOW_BEHAVIOURS``.

    Raises:
        ContractError: anything else.
    """
    v = str(value).strip().lower()
    if v not in OVERFLOW_BEHAVIOURS:
        raise ContractError(f"overflow={value!r} is not one of {OVERFLOW_BEHAVIOURS}")
    return v


def parse_contract(value) -> EpilogueContract:
    """EpilogueContract from a contract, dict, ``"cutlass"``, ``"triton"`` or
    ``"<scale_order>/<bias_point>"``.

    Raises:
        ContractError: unknown value.
    """
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
    """A :func:`declare` whose arguments are wrong, attached as ``fn.int8conf``
    instead of a :class:`KernelDeclaration`.

    Why deferred: raising inside the decorator would fail the import of the
    whole module, so one bad ``@declare`` would make every kernel of that
    module unloadable and the error would name only the module. Instead the
    module imports, the other kernels load, and loading this one raises
    KernelLoadError naming the function, the field and the value.

    Attributes:
        problems: ``((field, message), ...)`` one per bad argument, each
            message one line starting with ``field=value``.
    """

    problems: tuple

    def describe(self, fn) -> str:
        """One line: ``@declare(...) on function 'f' (module m): field=value: why; ...``."""
        where = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
        mod = getattr(fn, "__module__", None)
        return (
            f"@declare(...) on function {where!r}"
            + (f" (module {mod})" if mod else "")
            + ": "
            + "; ".join(msg for _, msg in self.problems)
        )


def declare(
    contract,
    devices=("cpu",),
    constraints: Optional[ShapeConstraints] = None,
    int_mm: Optional[Callable] = None,
    convention: str = "int8conf",
    name: str = "",
    version: str = "0",
    description: str = "",
    contiguous_only=False,
    overflow: str = "wrap",
) -> Callable:
    """Decorator attaching a :class:`KernelDeclaration` as ``fn.int8conf``.

    Every argument is validated here, but a bad one does not raise at
    decoration (module import) time: the decorated function then carries an
    :class:`InvalidDeclaration` (which fields are wrong and why), and loading
    it (``pkg.mod:fn``, an entry point, :func:`spec_from_object`) raises
    KernelLoadError naming the function and the field, while the other
    kernels of the same module still load.
    """
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

    field("contract", contract, _contract_and_steps)
    field("devices", devices, lambda v: _devices(v, f"devices={v!r}"))
    field("constraints", constraints, _cons)
    field("convention", convention, _conv)
    field("contiguous_only", contiguous_only, _flag)
    field("overflow", overflow, _overflow)
    if problems:
        decl = InvalidDeclaration(tuple(problems))
    else:
        cont, steps = values["contract"]
        decl = KernelDeclaration(
            cont,
            values["devices"],
            values["constraints"],
            int_mm,
            values["convention"],
            name,
            version,
            description,
            steps,
            values["contiguous_only"],
            values["overflow"],
        )

    def wrap(fn: Callable) -> Callable:
        fn.int8conf = decl
        return fn

    return wrap


def vllm_adapter(fn: Callable) -> Callable:
    """Wrap a vLLM-convention kernel ``fn(a, b[K,N], scale_a[M,1], scale_b[N,1],
    out_dtype, bias)`` into the int8conf convention ``(a, b[N,K], scale_a,
    scale_b, out_dtype=bf16, bias=None)``.

    ``b.t()`` is a [K,N] column-major view (no copy; when ``b`` itself is the
    transposed view of a [K,N] buffer, a column-major copy); scalar / 1-D scales are
    reshaped (broadcast for scalars) to [M,1] / [N,1] float32, values unchanged.
    """

    @functools.wraps(fn)
    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
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
        return fn(a, bt, sa, sb, out_dtype, bias)

    scaled_mm.int8conf_adapted = "vllm"
    return scaled_mm


def _declaration_from_attrs(obj, query: dict) -> Optional[KernelDeclaration]:
    decl = getattr(obj, "int8conf", None)
    if isinstance(decl, InvalidDeclaration):
        raise ContractError(decl.describe(obj))
    if isinstance(decl, KernelDeclaration):
        base = decl
    else:
        contract = query.get("contract", getattr(obj, "int8conf_contract", None))
        if contract is None:
            return None
        cons = getattr(obj, "int8conf_constraints", None)
        if isinstance(cons, dict):
            cons = ShapeConstraints(**cons)
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
        )
    over = {}
    if "contract" in query:
        over["contract"], over["steps"] = _contract_and_steps(query["contract"])
    if "convention" in query:
        over["convention"] = query["convention"]
    if "devices" in query:
        over["devices"] = _devices([d for d in query["devices"].split(",") if d], "?devices=")
    if "name" in query:
        over["name"] = query["name"]
    if "version" in query:
        over["version"] = query["version"]
    if "contiguous_only" in query:
        over["contiguous_only"] = _flag(query["contiguous_only"])
    if "overflow" in query:
        over["overflow"] = _overflow(query["overflow"])
    decl = replace(base, **over)
    if decl.convention not in CONVENTIONS:
        raise ContractError(f"convention={decl.convention!r} is not one of {CONVENTIONS}")
    if isinstance(decl.steps, dict):
        # a device the mapping does not name would be checked against the contract nearest
        # to its first entry: a silent guess
        keys = [k.split("/")[0] for k in decl.steps]
        missing = [d for d in decl.devices if d not in keys and "*" not in keys]
        if missing:
            raise ContractError(
                f"the per-device epilogue names {sorted(decl.steps)} but not the "
                f"declared device(s) {missing}: add an entry for each (or '*'), "
                f"or declare devices={tuple(sorted(set(keys)))}"
            )
    return decl


def spec_from_object(obj, name: str, origin: str, query: Optional[dict] = None) -> KernelSpec:
    """Turn a loaded object into a KernelSpec (see module docstring for the forms).

    Raises:
        KernelLoadError: not a KernelSpec / factory / declared callable, a bad
            declaration, or a declared name reserved for a built-in (or ``all``).
    """
    query = query or {}
    try:
        if getattr(obj, "int8conf_factory", False) and callable(obj):
            obj = obj()
        if isinstance(obj, KernelSpec):
            return _own_name(
                replace(obj, origin=origin, source_digest=obj.source_digest or callable_digest(obj.scaled_mm)), name
            )
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
            f"kernel {name!r} declares no epilogue contract: decorate it with "
            f"conformance.kernels.loader.declare(...), set fn.int8conf_contract, or append "
            f"'?contract=cutlass|triton|<order>/<bias_point>' to the name"
        )
    fn = vllm_adapter(obj) if decl.convention == "vllm" else obj
    return _own_name(
        KernelSpec(
            name=decl.name or name,
            scaled_mm=fn,
            contract=decl.contract,
            devices=decl.devices,
            constraints=decl.constraints,
            version=decl.version,
            source_digest=callable_digest(obj),
            int_mm=decl.int_mm,
            origin=origin,
            description=decl.description or f"{origin} ({decl.convention} convention)",
            steps=decl.steps,
            contiguous_only=decl.contiguous_only,
            overflow=decl.overflow,
        ),
        name,
    )


def _own_name(spec: KernelSpec, loaded_as: str) -> KernelSpec:
    """``spec`` unless it declares a built-in's name (or ``all``): its reports
    would land in, and replace, that built-in's report directory.

    Raises:
        KernelLoadError: the declared name is reserved.
    """
    if spec.name in BUILTINS or spec.name == "all":
        raise KernelLoadError(
            f"kernel {loaded_as!r} declares the name {spec.name!r}, which is reserved for "
            f"{'the built-in kernel' if spec.name != 'all' else 'every kernel'}: its reports "
            f"would replace reports/check/{spec.name}/; declare another name (declare(name=...) "
            f"or ?name=)"
        )
    return spec


QUERY_KEYS = ("contract", "convention", "devices", "name", "version", "contiguous_only", "overflow")


def split_query(name: str) -> tuple[str, dict]:
    """``"pkg.mod:fn?contract=cutlass"`` -> ``("pkg.mod:fn", {"contract": "cutlass"})``.

    Raises:
        ContractError: a key outside ``QUERY_KEYS`` (a typo would otherwise be
            dropped silently), or a key given twice (which one wins is not obvious).
    """
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
    """Declared device types, each one torch knows (``cpu``, ``cuda``, ...).

    Raises:
        ContractError: empty, or a name torch does not know as a device type.
    """
    devs = tuple(value)
    if not devs:
        raise ContractError(f"{where}: devices is empty; declare e.g. ('cpu',) or ('cuda',)")
    for d in devs:
        try:
            torch.device(d)
        except (RuntimeError, TypeError):
            raise ContractError(f"{where}: device {d!r} is not a torch device type (e.g. 'cpu', 'cuda')") from None
    return devs


def load_module_function(name: str, option: str = "--kernel") -> KernelSpec:
    """Load ``pkg.module:attr[.attr...][?query]`` (``option``: the option the
    name came from, named in the errors).

    Raises:
        KernelLoadError: one line naming the module / attribute / problem.
    """
    base, query = split_query(name)
    mod_name, _, attr = base.partition(":")
    if not mod_name or not attr:
        raise KernelLoadError(f"{option} {name!r}: expected 'pkg.module:function'")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 -- import errors of any kind become one line
        # the module itself (or its package) is missing, not a failing import inside it
        missing = (
            isinstance(e, ModuleNotFoundError)
            and e.name is not None
            and (mod_name == e.name or mod_name.startswith(e.name + "."))
        )
        hint = " (is its directory on PYTHONPATH? run from it or set PYTHONPATH)" if missing else ""
        raise KernelLoadError(
            f"{option} {name!r}: cannot import module {mod_name!r}: "
            f"{type(e).__name__}: {first_line(e, limit=None)}{hint}"
        ) from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise KernelLoadError(f"{option} {name!r}: module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return spec_from_object(obj, base, f"module:{base}", query)


def entry_point_names() -> list[str]:
    """Names in the ``int8conf.kernels`` entry-point group (installed distributions)."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})


def load_entry_point(name: str) -> Optional[KernelSpec]:
    """Load entry point ``name`` of group ``int8conf.kernels``; None if absent.

    Raises:
        KernelLoadError: the entry point exists but fails to load or declare.
    """
    base, query = split_query(name)
    eps = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == base]
    if not eps:
        return None
    try:
        obj = eps[0].load()
    except Exception as e:  # noqa: BLE001
        raise KernelLoadError(
            f"entry point {base!r} ({eps[0].value}) failed to load: {type(e).__name__}: {first_line(e, limit=None)}"
        ) from None
    return spec_from_object(obj, base, f"entry-point:{base}", query)


def cwd_on_sys_path(directory=None) -> None:
    """Put ``directory`` (default: the current directory) first on ``sys.path``
    (once), as ``python -m`` and pytest's rootdir do, so ``--kernel=mod:fn``
    finds ``mod.py`` in the folder the command runs from, also when started
    through the ``int8conf`` or ``pytest`` console scripts (whose ``sys.path[0]``
    is the script's folder)."""
    cwd = os.path.abspath(directory if directory is not None else os.getcwd())
    if not any(p in ("", cwd) or (p and os.path.abspath(p) == cwd) for p in sys.path):
        sys.path.insert(0, cwd)
