"""``Injection`` (fault, coverage, seed, F9 / F10 variant) and its text forms: ``F4:all``,
``output_truncation:1%``, ``F9.stale:one:3``, ``F10.d4`` (``--inject``) and the kernel-name
suffix ``+F4@all#s0``. Fault ids and names come from :mod:`faults.catalogue`."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Optional

from faults.catalogue import FAULTS, get_fault
from reference.errors import Int8confError, SeedError
from reference.seeds import check_seed

#: Coverage severities (DESIGN.md section 5): one element, 1 % of elements, all elements.
COVERAGES: tuple[str, ...] = ("one", "1%", "all")
#: F9 operand_mismatch variants (:mod:`faults.operand`); the first is the default.
F9_VARIANTS: tuple[str, ...] = ("pow2_scales", "stale", "transposed")
#: Faults realised in the operands (``faults.precondition``), not after the accumulator.
PRECONDITION_FAULTS = ("F6", "F7")
#: Faults that recompute selected elements from the accumulator (``faults.postprocessing``).
POSTPROCESSING_FAULTS = ("F1", "F2", "F3", "F4", "F5")
#: Faults that recompute selected elements from a narrower FP8 accumulator (``faults.accumulator``).
ACCUMULATOR_FAULTS = ("F10",)
#: Faults in a block-scaled kernel's K-block scale indexing (``faults.block``).
BLOCK_FAULTS = ("F11", "F12", "F13", "F14")
#: Faults in an asymmetric kernel's zero-point correction (``faults.block.stale_azp_operands``).
ZERO_POINT_FAULTS = ("F15",)
#: F10 narrow_accumulator variants ``d<N>``: N significant bits fewer than declared, N in 1 .. F10_MAX_DEFICIT.
F10_DEFAULT = "d10"
F10_MAX_DEFICIT = 22
_F10_VARIANT = re.compile(r"^d([1-9][0-9]?)$")


def fault_choices() -> str:
    """What ``--inject FAULT`` takes, for a help text: ``F1..F15 or its name (F9.stale, F9.transposed: the other F9
    variants)``, from the catalogue (:data:`faults.catalogue.FAULTS`) and :data:`F9_VARIANTS`."""
    others = ", ".join(f"F9.{v}" for v in F9_VARIANTS[1:])
    return f"{FAULTS[0].id}..{FAULTS[-1].id} or its name ({others}: the other F9 variants)"


def catalogue_order(fault: str) -> int:
    """Sort key of a fault id in catalogue order (``F2`` before ``F10``)."""
    return int(fault[1:])


def default_variant(fault: str) -> Optional[str]:
    """The variant an injection of fault id ``fault`` takes by default (F9 ``pow2_scales``, F10 ``d10``), else None."""
    return {"F9": F9_VARIANTS[0], "F10": F10_DEFAULT}.get(fault)


def f10_deficit(variant: Optional[str]) -> int:
    """Bits fewer than declared of F10 variant ``d<N>`` (None: the default); FaultError otherwise."""
    m = _F10_VARIANT.match(variant or F10_DEFAULT)
    if not m or not 1 <= int(m.group(1)) <= F10_MAX_DEFICIT:
        raise FaultError(
            f"unknown F10 variant {variant!r}; expected d<N>, N = 1..{F10_MAX_DEFICIT} bits fewer than declared"
        )
    return int(m.group(1))


class FaultError(Int8confError, ValueError):
    """A fault / coverage / seed / variant given by the user is not valid (one line)."""


@dataclass(frozen=True)
class Injection:
    """One validated fault injection (build it with :func:`make_injection`).

    ``fault`` is a catalogue id, ``variant`` the F9 variant or the F10 deficit ``d<N>`` (None
    for other faults).
    ``prepared`` (F6/F7 only): True = the operands are built by ``faults.prepare_case``
    and the wrapper passes through; False = the wrapper extends K itself on every call
    (callers that cannot prepare cases: detllm's engine, model replays, user tests).
    """

    fault: str
    coverage: str = "all"
    seed: int = 0
    variant: Optional[str] = None
    prepared: bool = True

    @property
    def name(self) -> str:
        return get_fault(self.fault).name

    @property
    def family(self) -> str:
        return get_fault(self.fault).family

    @property
    def spelled(self) -> str:
        """The fault as ``--inject`` spells it: ``F4``, ``F9.stale`` (a default variant left out)."""
        v = f".{self.variant}" if self.variant and self.variant != default_variant(self.fault) else ""
        return f"{self.fault}{v}"

    def suffix(self) -> str:
        """Kernel-name suffix ``+F4@all#s0`` (``+F9.stale@one#s3``; ``!`` when F6/F7 are not prepared)."""
        bang = "!" if (self.fault in PRECONDITION_FAULTS and not self.prepared) else ""
        return f"+{self.spelled}@{self.coverage}#s{self.seed}{bang}"

    def label(self) -> str:
        """e.g. ``F4 output_truncation, coverage all, seed 0``."""
        v = f" ({self.variant})" if self.variant else ""
        return f"{self.fault} {self.name}{v}, coverage {self.coverage}, seed {self.seed}"

    def to_dict(self) -> dict:
        """JSON-able dict, with ``name`` and ``family`` from the catalogue."""
        return dict(asdict(self), name=self.name, family=self.family)


def fault_id(fault: str) -> tuple[str, Optional[str]]:
    """``(id, variant or None)`` of ``F4`` / ``output_truncation`` / ``F9.stale`` /
    ``operand_mismatch.stale`` / ``F10.d4``. Raises FaultError: unknown fault or variant, or a
    variant on a fault other than F9 / F10."""
    if not isinstance(fault, str) or not fault.strip():
        raise FaultError(f"fault must be a non-empty string like 'F4', got {fault!r}")
    base, _, variant = fault.strip().partition(".")
    known = {f.id for f in FAULTS} | {f.name for f in FAULTS}
    try:  # ids are accepted in either case ("f4"), names as written in the catalogue
        fid = get_fault(base if base in known else base.upper()).id
    except Int8confError as e:
        raise FaultError(str(e)) from None
    if not variant:
        return fid, None
    if fid == "F10":
        f10_deficit(variant)
        return fid, variant
    if fid != "F9":
        raise FaultError(
            f"fault {fault!r}: only F9 operand_mismatch ({', '.join(F9_VARIANTS)}) and F10 narrow_accumulator "
            f"(d<N>) have variants"
        )
    if variant not in F9_VARIANTS:
        raise FaultError(f"unknown F9 variant {variant!r}; known: {', '.join(F9_VARIANTS)}")
    return fid, variant


def parse_coverage(text: str) -> str:
    """``one`` | ``1%`` | ``all`` (``1pct`` accepted as a shell-friendly alias); FaultError otherwise."""
    t = str(text).strip().lower()
    t = "1%" if t == "1pct" else t
    if t not in COVERAGES:
        raise FaultError(f"unknown coverage {text!r}; expected one of {', '.join(COVERAGES)}")
    return t


def make_injection(
    fault: str, coverage: str = "all", seed: int = 0, variant: Optional[str] = None, prepared: bool = True
) -> Injection:
    """Validated :class:`Injection`. ``fault``: id, name, ``F9.<variant>`` or ``F10.d<N>``;
    ``variant`` overrides the one in ``fault`` (defaults: :func:`default_variant`); ``seed``
    an int in [0, 2**63 - 1] (bool rejected). Raises FaultError naming the bad value."""
    fid, v = fault_id(fault)
    if variant is not None:
        _, v = fault_id(f"{fid}.{variant}")
    if v is None:
        v = default_variant(fid)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise FaultError(f"seed must be an integer >= 0, got {seed!r}")
    try:
        seed = check_seed(seed)
    except SeedError as e:
        raise FaultError(str(e)) from None
    return Injection(fid, parse_coverage(coverage), int(seed), v, bool(prepared))


_SPEC = re.compile(r"^(?P<fault>[A-Za-z0-9_.]+)(?::(?P<cov>[^:]+))?(?::(?P<seed>[^:]+))?$")


def parse_injection(text: str) -> Injection:
    """Parse ``FAULT[:COVERAGE[:SEED]]`` (the ``--inject`` option; coverage default
    ``all``, seed default 0), e.g. ``F4:all``, ``output_truncation:1%``,
    ``F9.transposed:one:7``, ``F10.d4``. Raises FaultError (one line)."""
    m = _SPEC.match(str(text).strip())
    if not m:
        raise FaultError(f"--inject {text!r}: expected FAULT[:COVERAGE[:SEED]], e.g. F4:all or output_truncation:1%")
    seed_t = m.group("seed")
    try:
        seed = int(seed_t) if seed_t is not None else 0
    except ValueError:
        raise FaultError(f"--inject {text!r}: seed {seed_t!r} is not an integer") from None
    try:
        return make_injection(m.group("fault"), m.group("cov") or "all", seed)
    except FaultError as e:
        raise FaultError(f"--inject {text!r}: {e}") from None


_SUFFIX = re.compile(
    r"^(?P<inner>.+)\+(?P<fault>F(?:1[0-5]|[1-9]))(?:\.(?P<variant>[a-z0-9_]+))?"
    r"@(?P<cov>one|1%|all)#s(?P<seed>\d+)(?P<bang>!?)$"
)
_LOOSE_SUFFIX = re.compile(r"^[^?]*\+F\d")


def split_injected_name(name: str) -> Optional[tuple[str, Injection]]:
    """``"triton+F4@all#s0"`` -> ``("triton", Injection("F4", "all", 0))`` (``fp8-cpu+F10.d4@1%#s0``); None without
    a suffix. Raises FaultError: a bad variant, or a ``+F<digit>`` suffix (before any
    ``?query``) in another form (e.g. ``cpu+F4@all#sx``)."""
    m = _SUFFIX.match(name or "")
    if not m:
        if _LOOSE_SUFFIX.match(name or ""):
            raise FaultError(
                f"kernel {name!r}: an injection suffix reads KERNEL+F<1-15>[.variant] (F9, F10.d<N>)"
                f"@<one|1%|all>#s<seed>[!], e.g. triton+F4@all#s0 or "
                f"cpu+F9.transposed@one#s7"
            )
        return None
    inj = make_injection(
        m.group("fault"), m.group("cov"), int(m.group("seed")), variant=m.group("variant"), prepared=not m.group("bang")
    )
    return m.group("inner"), inj
