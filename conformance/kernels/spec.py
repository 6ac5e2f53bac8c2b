"""The kernel contract of DESIGN.md section 3: what a registered kernel is.

``scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None)``
  a       int8   [M, K]  activations, row-major
  b       int8   [N, K]  weights (nn.Linear layout)
  scale_a float32 [M] | [M, 1] | scalar   per-token
  scale_b float32 [N] | [N, 1] | scalar   per-output-channel
  bias    out_dtype [N] or None
  returns out_dtype [M, N]

``int_mm(a, b) -> int32 [M, N]`` is the optional accumulator-only entry.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping, Optional, Union

from reference.contract import EpilogueContract
from reference.epilogue_steps import declared_to_dict
from reference.errors import ContractError

#: Declared behaviours of an accumulator that leaves int32 (``KernelSpec.overflow``).
OVERFLOW_BEHAVIOURS = ("wrap", "saturate", "undefined")

#: Names of the built-in kernels; reserved, no loaded kernel may declare one.
BUILTINS = ("cpu", "int_mm", "triton")


@dataclass(frozen=True)
class ShapeConstraints:
    """Shapes a kernel accepts natively (the harness pads or skips otherwise).

    Attributes:
        min_m: smallest M the kernel accepts (``torch._int_mm`` on CUDA: 17).
        m_multiple, k_multiple, n_multiple: required divisibility (1 = any).
        max_k: largest K (None = unbounded).
        note: free text shown in reports.
    """

    min_m: int = 1
    m_multiple: int = 1
    k_multiple: int = 1
    n_multiple: int = 1
    max_k: Optional[int] = None
    note: str = ""

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


@dataclass(frozen=True)
class KernelSpec:
    """A registered W8A8 kernel and everything it declares.

    Attributes:
        name: registry name (``cpu``, ``int_mm``, ``triton``, or a user name).
        scaled_mm: the callable of the contract above.
        contract: the declared epilogue (order of scales, bias point, rounding).
        devices: device types it runs on, e.g. ``("cpu",)`` or ``("cuda", "cpu")``.
        constraints: native shape constraints.
        version: free version string.
        source_digest: SHA-256 hex of the kernel's source (module file or
            callable source), used by check C1.
        int_mm: optional accumulator-only entry ``(a int8 [M,K], b int8 [N,K])
            -> int32 [M,N]``.
        origin: where it came from (``builtin``, ``module:pkg.mod:fn``,
            ``entry-point:name``).
        description: one line for reports.
        steps: optional declared epilogue *step list*
            (``reference.epilogue_steps``: an EpilogueSteps, or a mapping
            ``"cpu"`` / ``"cuda"`` / ``"cuda/float16"`` / ``"*"`` -> steps for a
            library whose path differs by device or out dtype). When set, C8
            holds the kernel to it; ``contract`` is then its nearest standard
            contract (used by C5/C6 for the bias point).
        contiguous_only: the kernel needs dense operands: True (all of them)
            or a tuple of operand names (``"a"``, ``"b"``, ``"scale_a"``,
            ``"scale_b"``, ``"bias"``). The runner then hands it contiguous
            copies of those operands when strided (padded ``a``, transposed
            ``b``, strided scales), and the report's coverage table says
            which layouts were NOT covered. False (default): the
            kernel accepts every layout of the contract (DESIGN.md 3: row-major
            with unit inner stride and leading stride >= K; ``b`` also as the
            transposed view of a [K, N] buffer; scales of any stride).
        overflow: what the accumulator does when a sum leaves int32
            (``conformance.checks.overflow``): ``"wrap"`` (two's complement,
            the default: the contract's accumulator is int32, and int32
            hardware adds wrap), ``"saturate"`` (clamped partial sums) or
            ``"undefined"`` (no promise); or a mapping device type
            (``"cpu"``, ``"cuda"``, ``"*"`` for the rest) -> one of those, for
            a kernel whose accumulator differs by device (the Triton
            built-in wraps in the interpreter, while NVIDIA integer MMA
            instructions clamp: :meth:`overflow_on`). Overflow is a
            precondition, never a failure: C3/C5/C6/C8 compare such elements
            with the declared behaviour (undefined ones are excluded and
            counted).
    """

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

    def __post_init__(self) -> None:
        values = self.overflow.values() if isinstance(self.overflow, Mapping) else (self.overflow,)
        for v in values:
            if v not in OVERFLOW_BEHAVIOURS:
                raise ContractError(
                    f"kernel {self.name!r}: overflow={self.overflow!r}: {v!r} is not one of {OVERFLOW_BEHAVIOURS}"
                )

    def overflow_on(self, device_type: Optional[str] = None) -> str:
        """The declared overflow behaviour on ``device_type`` (``"cpu"``,
        ``"cuda"``, or a full device string such as ``"cuda:1"``; None or
        unknown: the mapping's ``"*"`` entry, else ``"wrap"``)."""
        if not isinstance(self.overflow, Mapping):
            return self.overflow
        dev = (device_type or "").split(":")[0]
        return self.overflow.get(dev, self.overflow.get("*", "wrap"))

    def dense_operands(self) -> frozenset:
        """Operand names the kernel must be handed dense (see ``contiguous_only``)."""
        if self.contiguous_only is True:
            return frozenset(("a", "b", "scale_a", "scale_b", "bias"))
        if not self.contiguous_only:
            return frozenset()
        return frozenset(self.contiguous_only)

    def manifest(self) -> dict:
        """JSON-able declared manifest (no callables)."""
        return {
            "name": self.name,
            "contract": self.contract.to_dict(),
            "devices": list(self.devices),
            "constraints": asdict(self.constraints),
            "version": self.version,
            "source_digest": self.source_digest,
            "has_int_mm": self.int_mm is not None,
            "origin": self.origin,
            "description": self.description,
            "contiguous_only": (
                self.contiguous_only if isinstance(self.contiguous_only, bool) else sorted(self.contiguous_only)
            ),
            "overflow": (dict(self.overflow) if isinstance(self.overflow, Mapping) else self.overflow),
            **({"steps": _steps_dict(self.steps)} if self.steps is not None else {}),
        }


def _steps_dict(steps) -> dict:
    return declared_to_dict(steps)
