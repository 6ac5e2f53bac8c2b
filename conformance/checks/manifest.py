"""Check C1 kernel_manifest (DESIGN.md section 6): the kernel that ran vs the declared one, exact."""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from conformance.checks.case_check import ObservedAccumulator
from conformance.checks.compare import skipped_reason
from conformance.checks.result import CheckResult, Verdict, not_applicable
from conformance.kernels.runner import KernelRun
from conformance.kernels.spec import KernelSpec
from reference.operands import GemmOperands

C1 = "C1"
#: Evidence path of a non-built-in kernel that did not call ``trace.record_path``.
UNREPORTED_PATH = "not reported by kernel (runner-observed call)"


def _device_type(device: object) -> str:
    return str(device or "").split(":")[0]


#: ``config_rule`` values a kernel records for a configuration chosen by timing
TIMED_RULES = ("timed",)


def check_kernel_manifest(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C1: ``run.manifest`` vs ``spec``: name, source digest (a spec without one
    fails), device type in ``spec.devices``, a code path recorded by a
    built-in kernel (a third-party one passes with :data:`UNREPORTED_PATH`), and
    no launch configuration chosen by timing (a recorded ``config_rule`` in
    :data:`TIMED_RULES` or ``autotuned``: a run must certify a path it can name).
    ``n/a`` without a run to certify. Evidence ``{declared, observed, mismatches}``;
    ``observed`` carries the recorded ``config`` and ``config_rule``."""
    name = "kernel_manifest"
    if why := skipped_reason(run):
        return not_applicable(C1, why)
    if getattr(run, "output", None) is None:
        # nothing came back: "pass" would certify a run that verified nothing
        return not_applicable(
            C1, "kernel produced no output on this case" + (f" ({run.error})" if getattr(run, "error", None) else "")
        )
    m = dict(run.manifest or {})
    declared = {"name": spec.name, "source_digest": spec.source_digest, "devices": list(spec.devices)}
    observed = {k: m.get(k) for k in ("name", "source_digest", "device", "path", "interpreter", "padded")}
    bad = []
    if m.get("name") != spec.name:
        bad.append(f"ran name {m.get('name')!r}, declared {spec.name!r}")
    if not spec.source_digest:
        bad.append("kernel declares no source digest")
    elif m.get("source_digest") != spec.source_digest:
        got = str(m.get("source_digest"))[:12]
        bad.append(f"ran source digest {got}..., declared {spec.source_digest[:12]}...")
    dev = _device_type(m.get("device"))
    if dev not in [_device_type(d) for d in spec.devices]:
        bad.append(f"ran on device {m.get('device')!r}, declared {list(spec.devices)}")
    extra = m.get("extra") or {}
    observed.update(config=extra.get("config"), config_rule=extra.get("config_rule"))
    if extra.get("config_rule") in TIMED_RULES or extra.get("autotuned") is True:
        bad.append(f"configuration {extra.get('config')!r} was chosen by timing (it may differ in the next run)")
    path = m.get("path")
    observed["path_reported"] = bool(path) and path != "unreported"
    if not observed["path_reported"]:
        if spec.origin == "builtin":
            # silence from our own kernel: a wrapper or a stale module ran instead
            bad.append("kernel recorded no code path (conformance.kernels.trace.record_path)")
        else:
            # the runner saw the call: name / digest / device still identify it
            path = UNREPORTED_PATH
            observed["path"] = path
    ev = {"declared": declared, "observed": observed, "mismatches": bad}
    if bad:
        return CheckResult(C1, name, Verdict.FAIL, "; ".join(bad), ev)
    via = (
        f"via {path}"
        if observed["path_reported"]
        else "(its code path not reported by the kernel; the runner saw the call)"
    )
    return CheckResult(C1, name, Verdict.PASS, f"{spec.name} ran as declared on {m.get('device')} {via}", ev)
