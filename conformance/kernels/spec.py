"""The kernel contract (DESIGN.md section 3): ``scaled_mm(a int8 [M,K], b int8 [N,K], scale_a float32
[M]|[M,1]|scalar, scale_b float32 [N]|[N,1]|scalar, out_dtype=torch.bfloat16, bias out_dtype [N] | None) ->
out_dtype [M,N]``, and the optional accumulator-only ``int_mm(a, b) -> int32 [M,N]``."""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Union

import torch

from reference.asymmetric import AzpDeclaration, parse_azp_declaration
from reference.block.contract import BlockDeclaration, parse_block_declaration
from reference.contract import (
    EpilogueContract,
    EpilogueSteps,
    declaration_problems,
    declared_to_dict,
    parse_declared,
    parse_steps,
    select_key,
    steps_label,
)
from reference.errors import ContractError
from reference.fp8 import AccumulatorModel, parse_accumulator

#: Declared behaviours of an accumulator that leaves int32 (``KernelSpec.overflow``).
OVERFLOW_BEHAVIOURS = ("wrap", "saturate", "undefined")

#: Operand dtypes a kernel may declare (``KernelSpec.operands``): int8 (DESIGN.md 3) or FP8 e4m3 (3b).
OPERANDS = ("int8", "e4m3")
#: the FP8 operand type (``KernelSpec.is_fp8``)
FP8 = "e4m3"
#: Kernel kinds (:attr:`KernelSpec.kind`, :func:`kind_of`): int8 per-token x per-channel scales, e4m3 operands with
#: those scales, block scales (``block``, either operand dtype), asymmetric activations (``azp``, int8).
PER_TOKEN, FP8_KIND, BLOCK, ZERO_POINT = "per-token", "fp8", "block", "zero-point"
KINDS = (PER_TOKEN, FP8_KIND, BLOCK, ZERO_POINT)

#: Built-in kernels by operand dtype; ``"all"`` names the int8 ones. Every name in :data:`BUILTINS` is reserved.
INT8_BUILTINS = ("cpu", "int_mm", "triton")
FP8_BUILTINS = ("fp8-cpu", "torch-fp8", "torch-fp8-fast", "triton-fp8")
#: block-scaled built-ins (``reference.block``)
BLOCK_BUILTINS = ("block-cpu", "block-fp8-cpu", "triton-block", "triton-block-fp8")
#: asymmetric-activation built-ins (``reference.asymmetric``: ``azp_adj=`` / ``azp=`` calls)
AZP_BUILTINS = ("azp-cpu",)
BUILTINS = INT8_BUILTINS + FP8_BUILTINS + BLOCK_BUILTINS + AZP_BUILTINS

#: Set to ``1`` by every conformance run (check, pytest plugin, gate, sweep, study, scoreboard), inherited by its
#: worker processes. A kernel that picks launch configurations by timing must then pick them as a pure function of
#: (shape, dtypes, layout, device capability), so a run certifies a path it can name and repeat.
CONFORMANCE_RUN_ENV = "INT8CONF_CONFORMANCE_RUN"
#: ``full``: a JIT kernel keeps its production specialization in a conformance run too (``builtin_triton``)
SPECIALIZE_ENV = "INT8CONF_TRITON_SPECIALIZE"


def enter_conformance_run() -> None:
    """Mark this process and the processes it starts as a conformance run (:data:`CONFORMANCE_RUN_ENV`)."""
    os.environ[CONFORMANCE_RUN_ENV] = "1"


@contextlib.contextmanager
def conformance_run() -> Iterator[None]:
    """:func:`enter_conformance_run` inside the block; the variable's previous state after it."""
    old = os.environ.get(CONFORMANCE_RUN_ENV)
    enter_conformance_run()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(CONFORMANCE_RUN_ENV, None)
        else:
            os.environ[CONFORMANCE_RUN_ENV] = old


def in_conformance_run() -> bool:
    """True inside a conformance run: choose no configuration by timing."""
    return os.environ.get(CONFORMANCE_RUN_ENV, "0").strip() == "1"


_ACC_KEYS = ("kind", "bits", "rounding", "promote_every")


def parse_declared_accumulator(decl: Any) -> Union[None, AccumulatorModel, dict]:
    """A declared accumulator: None, one model (text, field mapping or model; ``reference.fp8.parse_accumulator``)
    or a mapping device type (``"cpu"``, ``"cuda"``, ``"*"``) -> one of those. ContractError (one line) when bad."""
    if decl is None or isinstance(decl, AccumulatorModel):
        return decl
    if isinstance(decl, Mapping) and decl and not set(decl) <= set(_ACC_KEYS):
        bad = [k for k in decl if k not in ("cpu", "cuda", "*")]
        if bad:
            raise ContractError(f"accumulator selector(s) {bad}: use 'cpu', 'cuda' or '*'")
        return {str(k): parse_accumulator(v) for k, v in decl.items()}
    return parse_accumulator(decl)


def kind_of(operands: str = "int8", block: bool = False, azp: bool = False) -> str:
    """The kernel kind (:data:`KINDS`) of a kernel with these ``operands`` (``"int8"`` / ``"e4m3"``), block scales
    (``block``) or asymmetric activations (``azp``; it wins over ``block``)."""
    if azp:
        return ZERO_POINT
    if block:
        return BLOCK
    return FP8_KIND if operands == FP8 else PER_TOKEN


def check_operands(operands: object, accumulator: object, devices: Iterable[str], name: str = "") -> None:
    """ContractError (one line) unless ``operands`` is one of :data:`OPERANDS`, an e4m3 kernel declares an
    accumulator (per-device mappings name every device in ``devices`` or ``"*"``) and an int8 kernel declares none."""
    who = f"kernel {name!r}: " if name else ""
    if operands not in OPERANDS:
        raise ContractError(f"{who}operands={operands!r} is not one of {OPERANDS}")
    if operands == "int8" and accumulator is not None:
        raise ContractError(f"{who}an int8 kernel declares no accumulator (its int32 sum is exact); drop accumulator=")
    if operands == FP8 and accumulator is None:
        raise ContractError(
            f"{who}an e4m3 kernel must declare its accumulator, e.g. accumulator='fp32 bits=14 truncate promote=128'"
        )
    if isinstance(accumulator, Mapping) and "*" not in accumulator:
        missing = [d for d in devices if d not in accumulator]
        if missing:
            raise ContractError(f"{who}the per-device accumulator names {sorted(accumulator)} but not {missing}")


@dataclass(frozen=True)
class DeclaredEpilogue:
    """The epilogue a kernel declares for one call (:func:`declared_epilogue`). ``steps``: the declared step list;
    ``contract``: the standard contract those steps are, else their nearest (whose bias point C5 / C6 compare
    with); ``standard``: the steps are exactly ``contract``'s (interchangeable); ``selector``: the key of a per-device
    / per-out-dtype mapping that matched ("" for a single declaration)."""

    steps: EpilogueSteps
    contract: EpilogueContract
    standard: bool
    selector: str = ""

    def label(self) -> str:
        """The contract's label when standard, else ``steps_label`` of the steps."""
        return self.contract.label() if self.standard else steps_label(self.steps)

    def to_dict(self) -> dict:
        out = {"contract": self.contract.to_dict(), "standard": self.standard, "selector": self.selector}
        return out | ({} if self.standard else {"steps": self.steps.to_list()})


def declared_epilogue(
    spec: Any, device_type: Optional[str] = None, out_dtype: torch.dtype = torch.bfloat16
) -> DeclaredEpilogue:
    """THE resolver of a kernel's declaration for a call on ``device_type`` (``"cuda:1"`` counts as ``"cuda"``;
    None: ``"cpu"``) with ``out_dtype``: ``spec.steps`` selected by ``reference.contract.select_steps`` (a mapping
    ``"<device>/<dtype>"``, ``"<device>"``, ``"*/<dtype>"``, ``"*"``), else ``spec.contract``. ``spec``: a KernelSpec
    or any object with ``contract`` (and optionally ``steps``). Every check that reads a declaration goes through
    here, so all of them hold a case to the same one."""
    decl = getattr(spec, "steps", None)
    if isinstance(decl, Mapping):
        sel = select_key(decl, device_type, out_dtype) or ""
        steps = decl[sel] if sel else None
    else:
        sel, steps = "", decl if isinstance(decl, EpilogueSteps) else None
    if steps is None:
        return DeclaredEpilogue(spec.contract.steps, spec.contract, True)
    std = steps.standard()
    return DeclaredEpilogue(steps, std or steps.nearest_contract(), std is not None, sel)


@dataclass(frozen=True)
class Declaration:
    """A kernel's epilogue declaration alone, e.g. read back from a report (:meth:`from_manifest`): ``contract`` and
    ``steps`` as :class:`KernelSpec`'s; :func:`declared_epilogue` reads it like a spec."""

    contract: EpilogueContract
    steps: Optional[object] = None

    @classmethod
    def from_manifest(cls, man: dict) -> "Declaration":
        """From ``KernelSpec.manifest()``'s ``contract`` and ``steps``; ContractError when they are malformed."""
        steps = man.get("steps")
        if isinstance(steps, Mapping) and "steps" in steps:
            steps = parse_steps(steps["steps"], steps.get("name", ""))
        elif isinstance(steps, Mapping):
            steps = parse_declared({k: parse_steps(v["steps"], v.get("name", "")) for k, v in steps.items()})
        return cls(EpilogueContract.from_dict(man.get("contract") or {}), steps)


@dataclass(frozen=True)
class ShapeConstraints:
    """Shapes and operand features a kernel accepts natively (the harness records a case outside them as
    skipped with the reason, never calls the kernel on it): ``min_m``, divisibility ``*_multiple`` (1 = any),
    ``max_k`` (None = unbounded); ``out_dtypes``: the output dtypes it writes (names as ``torch.bfloat16``'s
    ``"bfloat16"``; empty = any); ``scales``: ``"any"`` or ``"tensor"`` (one scale per operand: a 0-d or
    one-element scale_a and scale_b); ``bias``: False when it takes no bias (``no_bias_reason``: why, when the
    declaration implies it); ``note`` for reports."""

    min_m: int = 1
    m_multiple: int = 1
    k_multiple: int = 1
    n_multiple: int = 1
    max_k: Optional[int] = None
    note: str = ""
    out_dtypes: tuple = ()
    scales: str = "any"
    bias: bool = True
    no_bias_reason: str = ""

    def __post_init__(self) -> None:
        if self.scales not in ("any", "tensor"):
            raise ContractError(f"constraints scales={self.scales!r}: expected 'any' or 'tensor'")
        object.__setattr__(self, "out_dtypes", tuple(str(d).replace("torch.", "") for d in self.out_dtypes))

    def violations(self, m: int, k: int, n: int) -> list[str]:
        """Human-readable list of the constraints (m, k, n) breaks; [] if none."""
        out = []
        if m < self.min_m:
            out.append(f"M={m} < min_m={self.min_m}")
        for name, v, mult in (("M", m, self.m_multiple), ("K", k, self.k_multiple), ("N", n, self.n_multiple)):
            if mult > 1 and v % mult:
                out.append(f"{name}={v} is not a multiple of {mult}")
        if self.max_k is not None and k > self.max_k:
            out.append(f"K={k} > max_k={self.max_k}")
        return out

    def operand_violations(
        self,
        scale_a: torch.Tensor,
        scale_b: torch.Tensor,
        bias: Optional[torch.Tensor],
        out_dtype: torch.dtype,
        block: bool = False,
    ) -> list[str]:
        """Human-readable list of the operand features (tensors / dtype of one case) this kernel does not take;
        ``block``: a block-scaled case (its scale forms are the block declaration's, ``KernelSpec.block``)."""
        out = []
        dtype = str(out_dtype).replace("torch.", "")
        if self.out_dtypes and dtype not in self.out_dtypes:
            out.append(f"out dtype {dtype} is not one of {', '.join(self.out_dtypes)}")
        if not block and self.scales == "tensor" and (scale_a.numel() != 1 or scale_b.numel() != 1):
            out.append("per-token / per-channel scales: the kernel takes one scale per operand")
        if not self.bias and bias is not None:
            out.append("a bias: the kernel takes none" + (f" ({self.no_bias_reason})" if self.no_bias_reason else ""))
        return out


@dataclass(frozen=True)
class KernelSpec:
    """A registered W8A8 kernel and what it declares.

    ``source_digest``: SHA-256 hex of its source (check C1). ``origin``: ``builtin``, ``module:pkg.mod:fn``,
    ``entry-point:name`` or ``adapter:name``. ``steps``: optional declared epilogue step list
    (``reference.contract``), or a mapping ``"cpu"`` / ``"cuda"`` / ``"cuda/float16"`` / ``"*"`` -> steps;
    C8 then holds the kernel to it and ``contract`` is its nearest standard contract. ``contiguous_only``: True or
    operand names the runner hands dense (the report lists layouts not covered). ``overflow``: ``"wrap"``,
    ``"saturate"`` or ``"undefined"`` when a sum leaves int32, or a mapping device type (``"*"``: the rest) -> one
    of those; overflowing elements are compared with it, never failed. ``warm_up``: the kernel compiles per operand
    signature on a first call (a JIT such as Triton); a CUDA suite then calls it once per case layout in parallel
    processes before the cases run (``conformance.suite.warmup``), filling the JIT's disk cache; a callable taking
    ``scaled_mm``'s arguments and returning a hashable names the compiled variant a call would launch, so each is
    compiled once (else layouts are grouped by what a JIT usually specializes on). ``operands``:
    ``"int8"`` or ``"e4m3"`` (DESIGN.md 3b). ``accumulator``: an e4m3 kernel's declared accumulator
    (:func:`parse_declared_accumulator`: text, model, or a mapping ``"cpu"`` / ``"cuda"`` / ``"*"`` -> one); None for
    int8. ``block``: a block-scaled kernel's declaration (``reference.block.contract.parse_block_declaration``:
    block sizes, block accumulation, epilogue; each call then gets ``block_size=``; an epilogue with no bias step
    means the kernel takes no bias: ``constraints.bias`` is then False), None for a per-token x
    per-channel kernel. ``azp``: an asymmetric-activation kernel's declaration (``reference.asymmetric.
    parse_azp_declaration``: the zero-point forms it takes, where the correction is applied; each call then gets
    ``azp_adj=`` and ``azp=``), None for symmetric activations. ContractError (one line) on a bad overflow, operands,
    accumulator, block or azp declaration."""

    name: str
    scaled_mm: Callable
    contract: EpilogueContract
    devices: tuple = ("cpu",)
    constraints: ShapeConstraints = field(default_factory=ShapeConstraints)
    version: str = "0"
    source_digest: str = ""
    int_mm: Optional[Callable] = None
    origin: str = "builtin"
    description: str = ""
    steps: Optional[object] = None
    contiguous_only: Union[bool, tuple] = False
    overflow: Union[str, Mapping[str, str]] = "wrap"
    warm_up: Union[bool, Callable] = False
    operands: str = "int8"
    accumulator: Union[None, AccumulatorModel, Mapping[str, AccumulatorModel]] = None
    block: Optional[BlockDeclaration] = None
    azp: Optional[AzpDeclaration] = None

    def __post_init__(self) -> None:
        try:
            acc = parse_declared_accumulator(self.accumulator)
            block = None if self.block is None else parse_block_declaration(self.block)
            azp = None if self.azp is None else parse_azp_declaration(self.azp)
        except ContractError as e:
            raise ContractError(f"kernel {self.name!r}: {e}") from None
        object.__setattr__(self, "accumulator", acc)
        object.__setattr__(self, "block", block)
        if block is not None and not block.takes_bias and self.constraints.bias:
            why = f"its block epilogue {block.epilogue.label()!r} has no bias step"
            object.__setattr__(self, "constraints", replace(self.constraints, bias=False, no_bias_reason=why))
        object.__setattr__(self, "azp", azp)
        check_operands(self.operands, acc, self.devices, self.name)
        for field_name in ("scaled_mm", "int_mm"):
            fn = getattr(self, field_name)
            if fn is not None and not callable(fn):
                raise ContractError(f"kernel {self.name!r}: {field_name}={fn!r} is not callable")
        values = self.overflow.values() if isinstance(self.overflow, Mapping) else (self.overflow,)
        for v in values:
            if v not in OVERFLOW_BEHAVIOURS:
                raise ContractError(
                    f"kernel {self.name!r}: overflow={self.overflow!r}: {v!r} is not one of {OVERFLOW_BEHAVIOURS}"
                )

    @property
    def is_block(self) -> bool:
        """Whether the kernel is block-scaled (``block`` declared): its cases carry ``block_size``."""
        return self.block is not None

    @property
    def is_azp(self) -> bool:
        """Whether the kernel takes asymmetric activations (``azp`` declared): every call carries ``azp_adj=``."""
        return self.azp is not None

    def block_violations(self, block_size: Optional[tuple]) -> list[str]:
        """Why a case with ``block_size`` (None: per-token x per-channel scales) is not this kernel's call."""
        if block_size is None:
            return ["per-token x per-channel scales: the kernel is block-scaled"] if self.is_block else []
        if self.block is None:
            return ["block scales: the kernel declares none (block=)"]
        bs = (int(block_size[0]), int(block_size[1]))
        if bs not in self.block.sizes:
            sizes = ", ".join(f"{bn}x{bk}" for bn, bk in self.block.sizes)
            return [f"block size {bs[0]}x{bs[1]} is not one of the declared {sizes}"]
        return []

    def azp_violations(self, zero_point: Optional[str]) -> list[str]:
        """Why a case with ``zero_point`` (``GemmOperands.zero_point``: None, ``"per-tensor"``, ``"per-token"``) is
        not this kernel's call."""
        if zero_point is None:
            return ["symmetric activations: the kernel takes azp_adj= (asymmetric)"] if self.azp is not None else []
        if self.azp is None:
            return [f"asymmetric activations ({zero_point} zero point): the kernel declares none (azp=)"]
        if zero_point not in self.azp.kinds:
            return [f"{zero_point} zero point: the kernel declares {'/'.join(self.azp.kinds)} only"]
        return []

    @property
    def kind(self) -> str:
        """The kernel's kind (:data:`KINDS`, :func:`kind_of`): ``per-token``, ``fp8``, ``block`` or ``zero-point``;
        the suite's plan and the fault catalogue's kernel kind both read it."""
        return kind_of(self.operands, self.is_block, self.is_azp)

    @property
    def is_fp8(self) -> bool:
        """Whether the kernel takes e4m3 operands (DESIGN.md 3b), not int8 ones."""
        return self.operands == FP8

    def overflow_on(self, device_type: Optional[str] = None) -> str:
        """Declared overflow behaviour on ``device_type`` (``"cuda:1"`` counts as ``"cuda"``;
        None or unknown: the ``"*"`` entry, else ``"wrap"``)."""
        if not isinstance(self.overflow, Mapping):
            return self.overflow
        dev = (device_type or "").split(":")[0]
        return self.overflow.get(dev, self.overflow.get("*", "wrap"))

    def accumulator_on(self, device_type: Optional[str] = None) -> Optional[AccumulatorModel]:
        """Declared accumulator on ``device_type`` (``"cuda:1"`` counts as ``"cuda"``; None or unknown: the ``"*"``
        entry, else None); None for an int8 kernel."""
        if not isinstance(self.accumulator, Mapping):
            return self.accumulator
        dev = (device_type or "").split(":")[0]
        return self.accumulator.get(dev, self.accumulator.get("*"))

    def epilogue_on(
        self, device_type: Optional[str] = None, out_dtype: torch.dtype = torch.bfloat16
    ) -> DeclaredEpilogue:
        """:func:`declared_epilogue` of this kernel."""
        return declared_epilogue(self, device_type, out_dtype)

    def declaration_problems(self) -> list:
        """Why the declared step list(s) can never be interchangeable with the reference (one line each,
        ``reference.contract.declaration_problems``); [] for a standard contract."""
        return declaration_problems(self.steps)

    def dense_operands(self) -> frozenset:
        """Operand names the kernel must be handed dense."""
        if self.contiguous_only is True:
            return frozenset(("a", "b", "scale_a", "scale_b", "bias"))
        if not self.contiguous_only:
            return frozenset()
        return frozenset(self.contiguous_only)

    def manifest(self) -> dict:
        """JSON-able declared manifest (no callables)."""
        dense = self.contiguous_only if isinstance(self.contiguous_only, bool) else sorted(self.contiguous_only)
        out: dict[str, Any] = {"name": self.name, "contract": self.contract.to_dict(), "devices": list(self.devices)}
        out.update(constraints=asdict(self.constraints), version=self.version, source_digest=self.source_digest)
        out.update(has_int_mm=self.int_mm is not None, origin=self.origin, description=self.description)
        out["contiguous_only"] = dense
        out["warm_up"] = bool(self.warm_up)
        out["overflow"] = dict(self.overflow) if isinstance(self.overflow, Mapping) else self.overflow
        if self.steps is not None:
            out["steps"] = declared_to_dict(self.steps)
            problems = self.declaration_problems()
            if problems:
                out["not_interchangeable"] = problems
        out["operands"] = self.operands
        if self.block is not None:
            out["block"] = self.block.to_dict()
        if self.azp is not None:
            out["azp"] = self.azp.to_dict()
        acc = self.accumulator
        if acc is not None:
            out["accumulator"] = {k: v.label() for k, v in acc.items()} if isinstance(acc, Mapping) else acc.label()
        return out
