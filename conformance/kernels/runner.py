"""Run a registered kernel on one case and collect output plus evidence.

:func:`run_kernel` (:func:`start_kernel` then :meth:`KernelLaunch.result`:
the kernel's in-place and NaN verdicts are asked as ``reference.readback``
questions and read by ``result``, so a caller that starts several things
before reading pays one device read-back for all) never raises for a
kernel's own failure: an exception, an
output of the wrong type / shape / dtype, or NaN where the reference of the
kernel's *declared* contract has none, is written to ``KernelRun.error``
(one line) with the evidence in ``manifest["extra"]`` (traceback tail, NaN
count and first index, ...). Invalid *operands* (the caller's fault) raise
``OperandError`` before the kernel is called.

Any exception the kernel raises is its failure, ``SystemExit`` and other
``BaseException`` subclasses included (a kernel calling ``sys.exit`` must not
end ``int8conf check``); only ``KeyboardInterrupt`` propagates.

The kernel is handed *copies* of the operands that keep their layout (same
shape, strides and padding bytes: ``reference.operands.copy_keep_layout``),
so the caller's ``GemmOperands`` stay pristine for the reference and the
checks, and a kernel that ignores a padded leading stride or treats a
transposed ``b`` as dense reads what it would read in real use. A kernel
that declares ``contiguous_only`` gets dense copies instead;
``manifest["extra"]["operand_layouts"]`` records each operand's layout and
``["densified"]`` the operands handed as dense copies (layouts not covered). After the
call the clones are compared bit for bit with the originals; a kernel that
wrote into an operand gets ``error = "kernel modified operand <names> in
place"`` and ``manifest["extra"]["modified_operands"] = [names]`` (its output,
if well-formed, is kept as evidence).

Manifest keys (check C1): ``name``, ``source_digest`` (what the kernel
reported at run time, else the declared one; a digest recorded with
``digest_of=<a built-in's name>`` that equals that built-in's source digest
is that nested built-in's and is not promoted, any other claim counts as the
kernel's own and is listed, with why, in ``extra["refused_digest_claims"]``:
:func:`own_digests`), ``declared_source_digest``,
``device`` (device type of the returned tensor), ``path`` (what the kernel
reported via ``trace.record_path``; ``"unreported"`` otherwise),
``interpreter``, ``padded``, ``contract``, ``origin``, ``version``,
``operands_recorded_by`` (``"kernel"`` if it called ``trace.record_operands``,
else ``"runner"`` = digests of what the runner handed over, taken before the
call, i.e. before any in-place write by the kernel), ``skipped``
(True when the kernel cannot run here: device missing or shape outside its
declared constraints), ``extra``.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels.spec import KernelSpec
from reference import readback
from reference.errors import Int8confError, first_line
from reference.operands import GemmOperands

_PROMOTED = ("interpreter", "padded", "source_digest", "device")
#: Same-width integer dtypes used to compare operands bit for bit (NaN, -0.0).
_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass
class KernelRun:
    """Result of one ``scaled_mm`` call through :func:`run_kernel`.

    Attributes:
        output: out_dtype [M,N] on the CPU, or None when the kernel failed.
        error: one line describing the kernel's failure, None on success.
        manifest: what actually ran (module docstring lists the keys).
        received_digests: ``{"a","b","scale_a","scale_b","bias"}`` -> sha256
            hex (``reference.operands.tensor_digest``; bias "none" if absent).
        elapsed_s: wall-clock seconds of the kernel call (CUDA synchronized).
    """

    output: Optional[Tensor]
    error: Optional[str]
    manifest: dict
    received_digests: dict = field(default_factory=dict)
    elapsed_s: float = 0.0


@dataclass
class AccRun:
    """Result of one accumulator-only ``int_mm`` call through :func:`run_int_mm`.

    Attributes:
        acc: int32 [M,N] on the CPU, or None when the kernel failed / has no
            ``int_mm`` entry.
        error: one line, None on success.
        manifest: as in KernelRun (no received_digests: only a, b go in).
        elapsed_s: wall-clock seconds of the call (CUDA synchronized).
    """

    acc: Optional[Tensor]
    error: Optional[str]
    manifest: dict
    elapsed_s: float = 0.0

    @property
    def output(self) -> Optional[Tensor]:
        """Alias of ``acc`` (same name as KernelRun's field)."""
        return self.acc


def pick_device(spec: KernelSpec, device: Optional[str] = None) -> tuple[Optional[str], str]:
    """(device, reason): the requested device, else CUDA when the kernel
    supports it and one is present, else CPU when supported; (None, reason)
    when the kernel cannot run on this machine."""
    cuda = torch.cuda.is_available()
    if device is not None:
        dtype = torch.device(device).type
        if dtype not in spec.devices:
            return None, f"kernel {spec.name!r} supports devices {list(spec.devices)}, not {dtype!r}"
        if dtype == "cuda" and not cuda:
            return None, "device 'cuda' requested but torch.cuda.is_available() is False"
        return device, ""
    if "cuda" in spec.devices and cuda:
        return "cuda", ""
    if "cpu" in spec.devices:
        return "cpu", ""
    return None, (
        f"kernel {spec.name!r} supports devices {list(spec.devices)}, none available here (cuda available: {cuda})"
    )


def cuda_device(spec: KernelSpec, device: Optional[str] = None) -> Optional[str]:
    """The device :func:`pick_device` gives ``spec`` when it is a CUDA one
    (``"cuda"``, ``"cuda:N"``), else None (the CPU, or not runnable here)."""
    dev, _ = pick_device(spec, device)
    return dev if dev is not None and torch.device(dev).type == "cuda" else None


def _base_manifest(spec: KernelSpec, device: Optional[str]) -> dict:
    return {
        "name": spec.name,
        "source_digest": spec.source_digest,
        "declared_source_digest": spec.source_digest,
        "device": device or "",
        "path": "unreported",
        "interpreter": False,
        "padded": False,
        "contract": spec.contract.to_dict(),
        "origin": spec.origin,
        "version": spec.version,
        "operands_recorded_by": "",
        "skipped": False,
        "extra": {},
    }


def own_digests(name: str, digests: list) -> tuple[list, list]:
    """Split the run-time source digests a call recorded (``Trace.digests``:
    ``(digest, digest_of)`` pairs, in order) into the running kernel's own
    and the claims that were refused.

    A record with ``digest_of`` None or ``name`` is the running kernel's. A
    record naming another kernel is set aside (a nested kernel's identity,
    e.g. the built-in ``cpu`` inside a user's wrapper) only when it names a
    built-in *and* the digest is that built-in's registered source digest
    (``registry.builtin_source_digest``: the SHA-256 of its module file). Any
    other claim -- a user kernel calling ``record_path(...,
    digest_of="cpu")`` with a digest of its own, or naming a kernel that is
    not a built-in -- is refused and counted as the running kernel's, so C1
    compares it with the declared digest. Why the digest and not the caller:
    ``digest_of`` is a free argument, and the calling module (a stack
    frame's ``__name__``) can be set by any code that runs, whereas a
    digest can only match a built-in's when it names that built-in's exact
    source; a claim that is set aside therefore can never hide a digest
    that differs from anything registered. (A kernel can still record
    nothing at all and keep its declared digest: C1 checks what a kernel
    reports, not what the interpreter executed.)

    Args:
        name: the running kernel's name (``KernelSpec.name``).
        digests: ``Trace.digests``.

    Returns:
        ``(own, refused)``: the running kernel's digests in record order,
        and one line per refused claim saying why.
    """
    from conformance.kernels.registry import builtin_source_digest

    own, refused = [], []
    for digest, owner in digests:
        if owner in (None, name):
            own.append(digest)
            continue
        real = builtin_source_digest(owner)
        if real is not None and digest == real:
            continue  # the built-in's own record, made inside this kernel
        own.append(digest)
        why = (
            f"{owner!r} is not a built-in kernel"
            if real is None
            else f"built-in {owner!r} has source digest {real[:12]}..."
        )
        refused.append(
            f"digest {str(digest)[:12]}... recorded with digest_of={owner!r} counted as {name!r}'s own: {why}"
        )
    return own, refused


def _fill_from_trace(man: dict, t: trace.Trace) -> None:
    if t.path:
        man["path"] = t.path
    extra = dict(t.extra)
    man["interpreter"] = bool(extra.get("interpreter", "interpreter" in man["path"]))
    man["padded"] = bool(extra.get("padded", "padded" in man["path"]))
    # a digest a nested built-in recorded for itself (e.g. ``cpu`` inside a user's
    # wrapper, ``digest_of="cpu"``) identifies that kernel, not this one; a claim
    # that is not provably the built-in's counts as this kernel's (own_digests)
    own, refused = own_digests(man["name"], t.digests)
    if own:
        man["source_digest"] = own[-1]
    for k in _PROMOTED:
        extra.pop(k, None)
    if len(t.paths) > 1:
        extra["paths"] = list(t.paths)
    if refused:
        extra["refused_digest_claims"] = refused
    man["extra"].update(extra)


def _raised(man: dict, e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    man["extra"]["exception"] = type(e).__name__
    man["extra"]["traceback_tail"] = [f"{f.filename}:{f.lineno} in {f.name}" for f in tb[-4:]]
    where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return f"kernel raised {type(e).__name__}: {first_line(e)}{where}"


def _bits_equal(x: Tensor, y: Tensor) -> bool:
    """True when ``x`` and ``y`` have the same dtype, shape and bits (NaN
    payloads and the sign of zero count; ``torch.equal`` on floats would not)."""
    if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
        return False
    it = _INT_VIEW.get(x.element_size())
    if it is None or x.dtype == torch.bool:
        return bool(torch.equal(x, y))
    return bool(torch.equal(x.view(it), y.view(it)))


#: the unit scale ``run_int_mm`` validates ``a`` and ``b`` with (one object, so
#: its value check is memoized inside a ``reference.memo`` scope; never written)
_ONE = torch.ones((), dtype=torch.float32)


def _differing(originals: dict, given: dict, extra: tuple = ()) -> tuple[list, list]:
    """``(names, values)``: the names of the operands whose copy in ``given``
    no longer has the bits of the original (dtype, shape, bits; NaN payloads
    and the sign of zero count, as :func:`_bits_equal`), and the values of
    ``extra`` (0-d integer tensors, e.g. the output's NaN count) as ints:
    :func:`_ask_differing` read now."""
    return _ask_differing(originals, given, extra).get()


def _ask_differing(originals: dict, given: dict, extra: tuple = ()):
    """:func:`_differing` as a ``reference.readback.Deferred``: the
    per-operand verdicts and ``extra`` are asked together and read with
    whatever else is pending (one device sync on a GPU for all of them, and
    none of its own when the caller reads later, with its other questions).
    Operands whose copy changed dtype, shape or device are compared at once
    (``_bits_equal``: a kernel that replaced an operand, never the sweep's
    case)."""
    names, flags = [], []
    bad = []
    for k, v in originals.items():
        if v is None:
            continue
        g = given[k]
        it = _INT_VIEW.get(v.element_size())
        if (
            v.dtype != g.dtype
            or tuple(v.shape) != tuple(g.shape)
            or it is None
            or v.dtype == torch.bool
            or v.device != g.device
        ):
            if not _bits_equal(v, g):
                bad.append(k)
            continue
        names.append(k)
        flags.append((v.view(it) != g.view(it)).any())
    order = list(originals)
    nf = len(flags)

    def convert(vals: list) -> tuple[list, list]:
        got = bad + [k for k, f in zip(names, vals[:nf]) if f]
        return sorted(got, key=order.index), [int(v) for v in vals[nf:]]

    asked = flags + list(extra)
    if len({t.device for t in asked}) > 1:  # one transfer per device otherwise: read each
        return readback.ask([], lambda _: convert([int(t) for t in asked]))
    return readback.ask(asked, convert)


def _clone_operands(named: dict, dense=frozenset()) -> dict:
    """Copies handed to the kernel, None stays None: for names in ``dense``
    (a kernel that declares ``contiguous_only`` for them) contiguous copies,
    for the others copies with the same shape, strides and padding bytes
    (``reference.operands.copy_keep_layout``; ``Tensor.clone`` would make a
    padded view dense and hide a kernel that ignores the leading stride)."""
    from reference.operands import copy_keep_layout

    return {
        k: None if v is None else (v.detach().contiguous().clone() if k in dense else copy_keep_layout(v))
        for k, v in named.items()
    }


def _dense_names(spec) -> frozenset:
    """Operand names ``spec`` declares it needs dense (``contiguous_only``)."""
    fn = getattr(spec, "dense_operands", None)
    return fn() if callable(fn) else frozenset()


def _record_layouts(man: dict, originals: dict, given: dict) -> None:
    """``manifest["extra"]["operand_layouts"]``: the layout of each operand as
    the case has it; ``"densified"``: those the kernel got as dense copies
    instead (it declares ``contiguous_only``), i.e. layouts NOT covered."""
    from reference.operands import layout_label

    lay = {k: layout_label(v) for k, v in originals.items()}
    man["extra"]["operand_layouts"] = lay
    dens = sorted(k for k, v in originals.items() if v is not None and layout_label(given[k]) != lay[k])
    if dens:
        man["extra"]["densified"] = dens


def _modified_line(man: dict, bad: list, vals: list) -> tuple:
    """``(error line or None, vals)`` from :func:`_differing`'s answer: the
    line when the kernel wrote into any operand it was handed (the names go
    to ``manifest["extra"]["modified_operands"]``); ``vals`` passes through
    (the values of the extra tensors read with the verdicts)."""
    line = None
    if bad:
        man["extra"]["modified_operands"] = bad
        line = f"kernel modified operand {', '.join(bad)} in place"
    return line, vals


def _sync(device: Optional[str]) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _check_output(out, m: int, n: int, dtype: torch.dtype, what: str) -> Optional[str]:
    if not isinstance(out, Tensor):
        return f"{what} returned {type(out).__name__}, expected a torch.Tensor [{m},{n}] {dtype}"
    if tuple(out.shape) != (m, n):
        return f"{what} returned shape {tuple(out.shape)}, expected [{m},{n}]"
    if out.dtype != dtype:
        return f"{what} returned dtype {out.dtype}, expected {dtype}"
    if out.device.type not in ("cpu", "cuda"):  # e.g. 'meta': no values to compare
        return (
            f"{what} returned a tensor on device {out.device.type!r}, expected one on "
            f"'cpu' or 'cuda' holding its values"
        )
    if not out.is_contiguous():  # callers .view() the result as torch ops' outputs allow
        return (
            f"{what} returned a non-contiguous output (strides {tuple(out.stride())}), "
            f"expected a dense row-major [{m},{n}] tensor"
        )
    return None


def _nan_error(out: Tensor, ops: GemmOperands, spec: KernelSpec, man: dict, cnt: Optional[int] = None) -> Optional[str]:
    """Error line if ``out`` has NaN where the declared-contract reference has
    none (a legal kernel can produce NaN only where the reference does, e.g.
    0 * inf with a fused scale that overflows). ``cnt``: the output's NaN
    count when the caller already read it back (None: counted here)."""
    if not out.is_floating_point():
        return None
    nan = torch.isnan(out)
    if cnt is None:
        cnt = int(nan.sum())
    if cnt == 0:
        return None
    from reference.epilogue import reference_scaled_mm

    ref = reference_scaled_mm(
        ops.a, ops.b, ops.scale_a, ops.scale_b, spec.contract, bias=ops.bias, out_dtype=ops.out_dtype
    )
    bad = nan & ~torch.isnan(ref.to(nan.device))
    nbad = int(bad.sum())
    man["extra"]["nan_count"] = cnt
    if nbad == 0:
        man["extra"]["nan_expected"] = True  # the declared reference has NaN there too
        return None
    i, j = (int(v) for v in bad.nonzero()[0])
    man["extra"]["unexpected_nan_count"] = nbad
    man["extra"]["first_unexpected_nan"] = [i, j]
    return (
        f"kernel wrote NaN at {nbad} of {out.numel()} elements where the reference "
        f"({spec.contract.label()}) has none; first at [{i},{j}] (reference "
        f"{float(ref[i, j])!r})"
    )


def _guarded_call(man: dict, dev: str, fn: Callable, *args, **kwargs):
    """Call a kernel entry under ``trace.capture`` so that the kernel's own
    failure never escapes.

    Returns:
        ``(result or None, error line or None, elapsed seconds, trace record)``;
        the recorded path/extras are already merged into ``man``.
    Raises:
        KeyboardInterrupt only; every other exception, ``SystemExit``
        included, becomes the error line (evidence, not a crash).
    """
    t0 = time.perf_counter()
    with trace.capture() as t:
        try:
            out = fn(*args, **kwargs)
            _sync(dev)
            err = None
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 -- incl. SystemExit
            out, err = None, _raised(man, e)
    elapsed = time.perf_counter() - t0
    _fill_from_trace(man, t)
    return out, err, elapsed, t


class KernelLaunch:
    """A ``scaled_mm`` call made (:func:`start_kernel`) whose verdicts are
    asked but not read yet: :meth:`result` reads them (with every other
    pending ``reference.readback`` question) and gives the KernelRun.

    Attributes:
        output: the kernel's output on the device it returned it on, when it
            is well-formed (a dense tensor of the right shape and dtype), else
            None. Known before :meth:`result` (its NaN / in-place verdicts
            are not): a caller may start computing with it (the sweep asks
            its comparisons) and must judge it only from the KernelRun.
        manifest: the run's manifest (``device`` is set when there is an
            output; the in-place / NaN evidence is added by :meth:`result`).
        error: the failure line known at call time (exception, malformed
            output, not runnable here), or None: final whenever ``output``
            is None.
    """

    def __init__(self, spec, ops, output, error, manifest, elapsed, verdicts, digests, keep_on_device):
        self.spec, self.ops, self.output, self.error = spec, ops, output, error
        self.manifest, self.elapsed_s = manifest, elapsed
        self._verdicts, self._digests, self._keep = verdicts, digests, keep_on_device
        self._run: Optional[KernelRun] = None

    def result(self) -> KernelRun:
        """The KernelRun (module docstring; as :func:`run_kernel` returns it),
        made once."""
        if self._run is None:
            self._run = self._finish()
        return self._run

    def _finish(self) -> KernelRun:
        man = self.manifest
        if self._verdicts is None:  # not runnable here: nothing was called
            return KernelRun(None, self.error, man)
        mod_err, n_nan = _modified_line(man, *self._verdicts.get())
        digests = self._digests()
        if self.output is None:
            return KernelRun(None, self.error, man, digests, self.elapsed_s)
        out = self.output if self._keep else self.output.to("cpu")
        # NaN / in-place evidence keeps the output: the checks may still want the other elements
        nan_err = _nan_error(out, self.ops, self.spec, man, n_nan[0] if n_nan else None)
        return KernelRun(out, mod_err or nan_err, man, digests, self.elapsed_s)


#: Largest M * K * N whose kernel call is repeated for check C10 (output_ownership).
OWNERSHIP_MAX_WORK = 1 << 25


def _same_storage(x: Tensor, y: Optional[Tensor]) -> bool:
    return (
        isinstance(y, Tensor)
        and x.device == y.device
        and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    )


def _probe_ownership(man: dict, dev: str, spec: KernelSpec, given: dict, out: Tensor, out_dtype: torch.dtype) -> Tensor:
    """C10's evidence, in ``man["extra"]["ownership"]``: which operands the output
    shares storage with (``aliases``); then a second call on operands of the same
    shape and layout with other values (``~a``), after which the held output
    must keep its bits (``held_result_changed``: elements that changed) and
    share no storage with the new one (``second_output_shares_storage``);
    ``second_call_error``: that call's failure line, or None.

    Returns:
        the output as the kernel returned it (a copy taken at return time
        when a later call changed it, so the other checks judge the first call).
    """
    from reference.operands import copy_keep_layout

    ev: dict = {"aliases": [k for k, v in given.items() if _same_storage(out, v)]}
    snap = out.detach().clone()
    other = {k: copy_keep_layout(v) for k, v in given.items()}
    other["a"].bitwise_not_()
    scratch = _base_manifest(spec, dev)
    out2, err2, _, _ = _guarded_call(
        scratch,
        dev,
        spec.scaled_mm,
        other["a"],
        other["b"],
        other["scale_a"],
        other["scale_b"],
        out_dtype=out_dtype,
        bias=other["bias"],
    )
    ev["second_call_error"] = err2
    ev["second_output_shares_storage"] = _same_storage(out, out2)
    it = _INT_VIEW[out.element_size()]
    changed = int((snap.view(it) != out.detach().view(it)).sum())
    ev["held_result_changed"] = changed
    man["extra"]["ownership"] = ev
    return snap if changed else out


def start_kernel(
    spec: KernelSpec,
    ops: GemmOperands,
    device: Optional[str] = None,
    keep_on_device: bool = False,
    probe_ownership: bool = False,
) -> KernelLaunch:
    """:func:`run_kernel` up to the kernel call: the kernel runs on copies of
    the operands, its output's type / shape / dtype are checked, and the
    in-place verdicts and the output's NaN count are asked
    (``reference.readback``), not read.

    Args / Raises: as :func:`run_kernel`; ``probe_ownership``: record check C10's
    evidence (:func:`_probe_ownership`) for cases up to :data:`OWNERSHIP_MAX_WORK`
    whose ``meta["ownership_probe"]`` is not False (the suite probes one case per
    size class: ``conformance.suite.run.mark_ownership_probes``).

    Returns:
        :class:`KernelLaunch`; ``.result()`` is what :func:`run_kernel` returns.
    """
    from reference.validate import validate_operands

    m, k, n = validate_operands(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, ops.out_dtype)
    dev, why = pick_device(spec, device)
    man = _base_manifest(spec, dev)
    if dev is None:
        man["skipped"] = True
        return KernelLaunch(spec, ops, None, f"not runnable here: {why}", man, 0.0, None, None, keep_on_device)
    viol = spec.constraints.violations(m, k, n)
    if viol:
        man["skipped"] = True
        man["extra"]["constraint_violations"] = viol
        return KernelLaunch(
            spec,
            ops,
            None,
            f"not runnable here: shape outside declared constraints: {'; '.join(viol)}",
            man,
            0.0,
            None,
            None,
            keep_on_device,
        )
    dops = ops.to(dev)  # on the CPU these are the caller's own tensors: never hand them out
    originals = {"a": dops.a, "b": dops.b, "scale_a": dops.scale_a, "scale_b": dops.scale_b, "bias": dops.bias}
    given = _clone_operands(originals, dense=_dense_names(spec))
    _record_layouts(man, originals, given)
    out, err, elapsed, t = _guarded_call(
        man,
        dev,
        spec.scaled_mm,
        given["a"],
        given["b"],
        given["scale_a"],
        given["scale_b"],
        out_dtype=dops.out_dtype,
        bias=given["bias"],
    )
    if err is None:
        err = _check_output(out, m, n, ops.out_dtype, "kernel")
    if (
        err is None
        and probe_ownership
        and m * k * n <= OWNERSHIP_MAX_WORK
        and (ops.meta or {}).get("ownership_probe", True)
    ):
        out = _probe_ownership(man, dev, spec, given, out, dops.out_dtype)
    # the output's NaN count is asked with the in-place verdicts (one read-back)
    asked = (torch.isnan(out).sum(),) if err is None and out.is_floating_point() else ()
    verdicts = _ask_differing(originals, given, asked)

    def digests() -> tuple:
        if t.received_digests:
            man["operands_recorded_by"] = "kernel"
            return t.received_digests
        # the originals are untouched, so this is what was handed over
        man["operands_recorded_by"] = "runner"
        return trace.digest_operands(dops.a, dops.b, dops.scale_a, dops.scale_b, dops.bias)

    if err is not None:
        return KernelLaunch(spec, ops, None, err, man, elapsed, verdicts, digests, keep_on_device)
    man["device"] = out.device.type
    return KernelLaunch(spec, ops, out.detach(), None, man, elapsed, verdicts, digests, keep_on_device)


def run_kernel(
    spec: KernelSpec, ops: GemmOperands, device: Optional[str] = None, keep_on_device: bool = False
) -> KernelRun:
    """Run ``spec.scaled_mm`` on ``ops`` and check what came back.

    Args:
        spec: the kernel.
        ops: the case (moved to the chosen device before the call).
        device: "cpu", "cuda", "cuda:1", ...; None = CUDA if the kernel
            supports it and one is present, else CPU.
        keep_on_device: leave the output on the device the kernel returned
            it on (the sweep, whose references live there: no copy to the
            host and back per cell); default: copied to the CPU.
    Returns:
        KernelRun (output on the CPU, or where the kernel returned it with
        ``keep_on_device``). Kernel failures go to ``error``
        (exceptions incl. ``SystemExit``; wrong output; unexpected NaN; an
        operand modified in place -- the kernel gets clones, ``ops`` is never
        written); ``manifest["skipped"]`` is True when the kernel cannot run here.
    Raises:
        OperandError: ``ops`` themselves are invalid
            (``reference.validate.validate_operands``).
    """
    return start_kernel(spec, ops, device, keep_on_device).result()


class AccLaunch:
    """An ``int_mm`` call made (:func:`start_int_mm`), its in-place verdicts
    asked, not read; :meth:`result` gives the AccRun.

    Attributes:
        acc: the accumulator as returned (on the kernel's device) when it is
            well-formed (int32 [M, N], dense), else None; known before
            :meth:`result` (judge it only from the AccRun).
        manifest, error: as :class:`KernelLaunch`.
    """

    def __init__(self, acc, error, manifest, elapsed, verdicts, keep_on_device):
        self.acc, self.error, self.manifest, self.elapsed_s = acc, error, manifest, elapsed
        self._verdicts, self._keep = verdicts, keep_on_device
        self._run: Optional[AccRun] = None

    def result(self) -> AccRun:
        """The AccRun (as :func:`run_int_mm` returns it), made once."""
        if self._run is None:
            if self._verdicts is None:
                self._run = AccRun(None, self.error, self.manifest)
            else:
                mod_err, _ = _modified_line(self.manifest, *self._verdicts.get())
                if self.acc is None:
                    self._run = AccRun(None, self.error, self.manifest, self.elapsed_s)
                else:
                    self._run = AccRun(
                        self.acc if self._keep else self.acc.to("cpu"), mod_err, self.manifest, self.elapsed_s
                    )
        return self._run


def start_int_mm(
    spec: KernelSpec, a: Tensor, b: Tensor, device: Optional[str] = None, keep_on_device: bool = False
) -> AccLaunch:
    """:func:`run_int_mm` up to the call: the in-place verdicts are asked
    (``reference.readback``), not read. Args / Raises as :func:`run_int_mm`;
    ``.result()`` of the returned :class:`AccLaunch` is what it returns."""
    from reference.validate import validate_operands

    m, _, n = validate_operands(a, b, _ONE, _ONE)
    dev, why = pick_device(spec, device)
    man = _base_manifest(spec, dev)
    if spec.int_mm is None:
        man["skipped"] = True
        return AccLaunch(
            None, f"kernel {spec.name!r} has no int_mm (accumulator-only) entry", man, 0.0, None, keep_on_device
        )
    if dev is None:
        man["skipped"] = True
        return AccLaunch(None, f"not runnable here: {why}", man, 0.0, None, keep_on_device)
    from reference.operands import copy_keep_layout

    originals = {
        "a": a if a.device == torch.device(dev) else copy_keep_layout(a, dev),
        "b": b if b.device == torch.device(dev) else copy_keep_layout(b, dev),
    }
    given = _clone_operands(originals, dense=_dense_names(spec))
    _record_layouts(man, originals, given)
    acc, err, elapsed, _ = _guarded_call(man, dev, spec.int_mm, given["a"], given["b"])
    verdicts = _ask_differing(originals, given)
    if err is None:
        err = _check_output(acc, m, n, torch.int32, "int_mm")
    if err is not None:
        return AccLaunch(None, err, man, elapsed, verdicts, keep_on_device)
    man["device"] = acc.device.type
    return AccLaunch(acc.detach(), None, man, elapsed, verdicts, keep_on_device)


def run_int_mm(
    spec: KernelSpec, a: Tensor, b: Tensor, device: Optional[str] = None, keep_on_device: bool = False
) -> AccRun:
    """Run the accumulator-only entry ``spec.int_mm(a, b)``.

    Args:
        spec: the kernel; a: int8 [M,K]; b: int8 [N,K]; device and
            keep_on_device as in :func:`run_kernel`.
    Returns:
        AccRun with int32 [M,N] on the CPU (with ``keep_on_device``: where
        the kernel returned it), or ``error`` ("kernel has no int_mm
        entry", an exception incl. ``SystemExit``, wrong shape/dtype, "kernel
        modified operand a in place" -- it gets clones of a, b).
    Raises:
        OperandError: invalid a / b (dtype, shape, layout, K mismatch, empty).
    """
    return start_int_mm(spec, a, b, device, keep_on_device).result()


def validate_device(device: Optional[str]) -> Optional[str]:
    """Check a user's ``--device`` string before any kernel runs.

    Args:
        device: ``None`` (runner default), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ...

    Returns:
        ``device`` unchanged.

    Raises:
        Int8confError: not a torch device string (e.g. ``tpu``); CUDA
            requested while ``torch.cuda.is_available()`` is False; a CUDA
            index beyond ``torch.cuda.device_count()``; a CPU index other than 0
            (``cpu:1``: torch has one CPU device) (one line each).
    """
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError) as e:
        raise Int8confError(
            f"--device {device!r}: not a valid device ({type(e).__name__}); use cpu, cuda or cuda:N"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise Int8confError(f"--device {device!r}: CUDA requested but torch.cuda.is_available() is False")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise Int8confError(f"--device {device!r}: only {torch.cuda.device_count()} CUDA device(s) present")
    elif dev.type != "cpu":
        raise Int8confError(
            f"--device {device!r}: unsupported device type {dev.type!r} (int8conf runs kernels on 'cpu' or 'cuda')"
        )
    elif dev.index not in (None, 0):
        # torch has one CPU device; "cpu:1" would silently run on it
        raise Int8confError(f"--device {device!r}: there is one CPU device; use 'cpu'")
    return device
