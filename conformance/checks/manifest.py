"""Check C1 kernel_manifest (DESIGN.md section 6): the kernel that actually
ran (name, source digest, device, code path) vs the declared one, exact."""

from __future__ import annotations

from conformance.checks.compare import skipped_reason
from conformance.checks.result import CheckResult, not_applicable

C1 = "C1"
#: Evidence path of a non-built-in kernel that did not call ``trace.record_path``.
UNREPORTED_PATH = "not reported by kernel (runner-observed call)"


def _device_type(device) -> str:
    return str(device or "").split(":")[0]


def check_kernel_manifest(spec, ops, run, acc=None, exact=None) -> CheckResult:
    """C1: compare ``run.manifest`` with ``spec``'s declared manifest.

    Fails when: the run's ``name`` differs from ``spec.name``; the run's
    ``source_digest`` differs from ``spec.source_digest`` (or the spec
    declares none, so what ran cannot be identified); the run's device type
    (``"cuda:0"`` -> ``"cuda"``) is not in ``spec.devices``; a built-in
    (``spec.origin == "builtin"``) recorded no code ``path``. A third-party
    kernel (any other origin) need not call ``trace.record_path``: an
    unreported path passes, with evidence path :data:`UNREPORTED_PATH` and
    ``path_reported: False`` (name, digest and device are still compared).
    The path itself (e.g. ``triton-interpreter`` vs ``triton-native``,
    ``int_mm-padded``) is not declared by a KernelSpec; it
    is reported in the evidence, and the interpreter flag with it. A kernel
    that could not run here (runner's ``manifest["skipped"]``) or produced no
    output (raised, wrong dtype / shape) gives ``n/a``: there is no run to certify.

    Args:
        spec: KernelSpec (declared manifest ``spec.manifest()``).
        ops, acc, exact: unused (uniform check signature).
        run: KernelRun whose ``manifest`` has ``name, source_digest, device,
            path, interpreter, padded, extra``.

    Returns:
        CheckResult with evidence ``{"declared": {...}, "observed": {...},
        "mismatches": [one line each]}``.
    """
    name = "kernel_manifest"
    if skipped_reason(run):
        return not_applicable(C1, skipped_reason(run))
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
    path = m.get("path")
    observed["path_reported"] = bool(path) and path != "unreported"
    if not observed["path_reported"]:
        if spec.origin == "builtin":
            # our own kernels always report their path; silence means a wrapper
            # or a stale module ran instead
            bad.append("kernel recorded no code path (conformance.kernels.trace.record_path)")
        else:
            # a third-party kernel cannot be required to import our trace module;
            # the runner saw the call itself, so name/digest/device still identify it
            path = UNREPORTED_PATH
            observed["path"] = path
    ev = {"declared": declared, "observed": observed, "mismatches": bad}
    if bad:
        return CheckResult(C1, name, "fail", "; ".join(bad), ev)
    return CheckResult(C1, name, "pass", f"{spec.name} ran as declared on {m.get('device')} via {path}", ev)
