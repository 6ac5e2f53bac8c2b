"""Run a registered kernel on one case and collect its output and evidence (checks C1, C2, C10).

:func:`run_kernel` / :func:`run_int_mm` (= ``start_*`` then ``.result()``: verdicts are ``reference.readback``
questions, read together) never raise for a kernel's own failure: an exception (``SystemExit`` and a
``KeyboardInterrupt`` the kernel raised itself included; only a stop, SIGINT or SIGTERM, propagates), a malformed output, an operand written in place, or NaN where the declared
contract's reference has none becomes ``KernelRun.error`` (one line) with evidence in ``manifest["extra"]``. Invalid
operands (int8 for an int8 kernel, e4m3 without NaN for an e4m3 one: ``KernelSpec.operands``) raise ``OperandError``
first. The kernel gets copies that keep each operand's layout (dense copies for what
it declares ``contiguous_only``). Manifest keys: ``name``, ``source_digest`` (reported at run time, else declared;
:func:`own_digests`), ``declared_source_digest``, ``device``, ``path`` (``"unreported"`` if none), ``interpreter``,
``padded``, ``contract``, ``origin``, ``version``, ``operands_recorded_by`` (``"kernel"`` / ``"runner"``),
``skipped`` (cannot run here), ``extra``."""

from __future__ import annotations

import functools
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels.declared import declared_reference
from conformance.kernels.registry import builtin_source_digest
from conformance.kernels.spec import KernelSpec
from conformance.runtime.graceful_stop import stop_requested
from reference import readback
from reference.errors import Int8confError, first_line
from reference.fp8 import E4M3
from reference.operands import GemmOperands, copy_keep_layout, layout_label
from reference.validate import check_device, validate_operands

_PROMOTED = ("interpreter", "padded", "source_digest", "device")
#: Same-width integer dtypes used to compare operands bit for bit (NaN, -0.0).
_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass
class KernelRun:
    """One ``scaled_mm`` call: ``output`` out_dtype [M,N] on the CPU (None on failure), ``error`` (one line
    or None), ``manifest``, ``received_digests`` (operand -> sha256 hex, bias "none"), ``elapsed_s`` (CUDA synced),
    ``interface``: the :func:`interface_violation` line (or the in-place write) when the call returned but broke
    the contract's interface (then ``output`` is None and ``error`` is that line), else None; ``raised``:
    ``<exception type>: <first line of its message>`` when the call raised (then ``output`` is None and ``error``
    is the runner's line), else None."""

    output: Optional[Tensor]
    error: Optional[str]
    manifest: dict
    received_digests: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    interface: Optional[str] = None
    raised: Optional[str] = None


@dataclass
class AccRun:
    """One ``int_mm`` call: ``acc`` int32 [M,N] on the CPU or None, ``error``, ``manifest``, ``elapsed_s``."""

    acc: Optional[Tensor]
    error: Optional[str]
    manifest: dict
    elapsed_s: float = 0.0

    @property
    def output(self) -> Optional[Tensor]:
        return self.acc


def pick_device(spec: KernelSpec, device: Optional[str] = None) -> tuple[Optional[str], str]:
    """``(device, reason)``: the requested device, else CUDA when supported and present, else CPU when
    supported; ``(None, reason)`` when the kernel cannot run here."""
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
    return (
        None,
        f"kernel {spec.name!r} supports devices {list(spec.devices)}, none available here (cuda available: {cuda})",
    )


def cuda_device(spec: KernelSpec, device: Optional[str] = None) -> Optional[str]:
    """The device :func:`pick_device` gives when it is a CUDA one, else None."""
    dev, _ = pick_device(spec, device)
    return dev if dev is not None and torch.device(dev).type == "cuda" else None


def _base_manifest(spec: KernelSpec, device: Optional[str]) -> dict:
    man: dict[str, Any] = dict(
        name=spec.name, source_digest=spec.source_digest, declared_source_digest=spec.source_digest
    )
    man.update(
        device=device or "", path="unreported", interpreter=False, padded=False, contract=spec.contract.to_dict()
    )
    man.update(origin=spec.origin, version=spec.version, operands_recorded_by="", skipped=False, extra={})
    return man


def own_digests(name: str, digests: list) -> tuple[list, list]:
    """Split ``Trace.digests`` (``(digest, digest_of)`` pairs) into ``(own, refused)``: records with
    ``digest_of`` None or ``name`` are the kernel's; one naming a built-in with exactly that built-in's source digest
    is set aside (a nested built-in); any other claim counts as the kernel's own, with one line in ``refused`` saying
    why (so ``digest_of`` cannot hide a digest that matches nothing registered)."""
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
    # a digest a nested built-in recorded for itself identifies that kernel, not this one (own_digests)
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
    man["extra"]["exception_message"] = first_line(e)
    man["extra"]["traceback_tail"] = [f"{f.filename}:{f.lineno} in {f.name}" for f in tb[-4:]]
    where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return f"kernel raised {type(e).__name__}: {first_line(e)}{where}"


def _bits_equal(x: Tensor, y: Tensor) -> bool:
    """Same dtype, shape and bits (NaN payloads and the sign of zero count)."""
    if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
        return False
    it = _INT_VIEW.get(x.element_size())
    if it is None or x.dtype == torch.bool:
        return bool(torch.equal(x, y))
    return bool(torch.equal(x.view(it), y.view(it)))


#: the unit scale ``run_int_mm`` validates ``a`` and ``b`` with (one object: its check is memoized; never written)
_ONE = torch.ones((), dtype=torch.float32)


def _differing(originals: dict, given: dict, extra: tuple = ()) -> tuple[list, list]:
    """(names of the operands whose bits changed, values of ``extra`` as ints): :func:`_ask_differing` read now."""
    return _ask_differing(originals, given, extra).get()


def _ask_differing(originals: dict, given: dict, extra: tuple = ()):
    """:func:`_differing` as a ``reference.readback.Deferred`` (one device sync with the other
    pending questions); operands that changed dtype, shape or device are compared at once."""
    names, flags = [], []
    bad = []
    for k, v in originals.items():
        if v is None:
            continue
        g = given[k]
        it = _INT_VIEW.get(v.element_size())
        same_meta = v.dtype == g.dtype and tuple(v.shape) == tuple(g.shape) and v.device == g.device
        if not same_meta or it is None or v.dtype == torch.bool:
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
    """Copies handed to the kernel: dense for names in ``dense``, else the same shape, strides and
    padding bytes (``copy_keep_layout``); None stays None."""
    return {
        k: None if v is None else (v.detach().contiguous().clone() if k in dense else copy_keep_layout(v))
        for k, v in named.items()
    }


def _dense_names(spec) -> frozenset:
    fn = getattr(spec, "dense_operands", None)
    return fn() if callable(fn) else frozenset()


def _record_layouts(man: dict, originals: dict, given: dict) -> None:
    """``extra["operand_layouts"]``: each operand's layout; ``extra["densified"]``: those handed as
    dense copies (layouts not covered)."""
    lay = {k: layout_label(v) for k, v in originals.items()}
    man["extra"]["operand_layouts"] = lay
    dens = sorted(k for k, v in originals.items() if v is not None and layout_label(given[k]) != lay[k])
    if dens:
        man["extra"]["densified"] = dens


def _modified_line(man: dict, bad: list, vals: list) -> tuple:
    """``(error line or None, vals)``: the line when the kernel wrote into an operand (names in
    ``extra["modified_operands"]``)."""
    line = None
    if bad:
        man["extra"]["modified_operands"] = bad
        line = f"kernel modified operand {', '.join(bad)} in place"
    return line, vals


def _sync(device: Optional[str]) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def interface_violation(out, m: int, n: int, dtype: torch.dtype, what: str = "kernel", operands=None) -> Optional[str]:
    """The one place an output's interface is judged: one line when ``out`` is not what the contract returns,
    else None. Violations: not a tensor (``None`` included), shape other than [m, n], dtype other than ``dtype``,
    a device holding no values, not dense row-major (column-major, strided), storage shared with an operand of
    ``operands`` (name -> tensor or None: the tensors handed to the kernel). In-place writes to an operand are
    found after the call (:func:`_modified_line`) and are interface failures too (``KernelRun.interface``)."""
    if not isinstance(out, Tensor):
        got = "None" if out is None else type(out).__name__
        return f"{what} returned {got}, expected a torch.Tensor [{m},{n}] {dtype}"
    if tuple(out.shape) != (m, n):
        return f"{what} returned shape {tuple(out.shape)}, expected [{m},{n}]"
    if out.dtype != dtype:
        return f"{what} returned dtype {out.dtype}, expected {dtype}"
    if out.device.type not in ("cpu", "cuda"):  # e.g. 'meta': no values to compare
        return f"{what} returned a tensor on device {out.device.type!r}, expected one on 'cpu' or 'cuda' holding its values"
    if not out.is_contiguous():  # callers .view() the result as torch ops' outputs allow
        layout = "column-major" if m > 1 and n > 1 and out.stride() == (1, m) else "non-contiguous"
        return f"{what} returned a {layout} output (strides {tuple(out.stride())}), expected a dense row-major [{m},{n}] tensor"
    shared = [k for k, v in (operands or {}).items() if _same_storage(out, v)]
    if shared:
        return f"{what} returned an output that shares storage with operand {', '.join(shared)} (written in place)"
    return None


def _nan_error(out: Tensor, ops: GemmOperands, spec: KernelSpec, man: dict, cnt: Optional[int] = None) -> Optional[str]:
    """Error line if ``out`` has NaN where the declared-contract reference has none; ``cnt``: the NaN
    count if already read."""
    if not out.is_floating_point():
        return None
    nan = torch.isnan(out)
    if cnt is None:
        cnt = int(nan.sum())
    if cnt == 0:
        return None
    declared = declared_reference(spec, ops, man.get("device"))
    ref, label = declared.output, declared.label
    bad = nan & ~torch.isnan(ref.to(nan.device))
    nbad = int(bad.sum())
    man["extra"]["nan_count"] = cnt
    if nbad == 0:
        man["extra"]["nan_expected"] = True  # the declared reference has NaN there too
        return None
    i, j = (int(v) for v in bad.nonzero()[0])
    man["extra"]["unexpected_nan_count"] = nbad
    man["extra"]["first_unexpected_nan"] = [i, j]
    return f"kernel wrote NaN at {nbad} of {out.numel()} elements where the reference ({label}) has none; first at [{i},{j}] (reference {float(ref[i, j])!r})"


def raised_text(man: dict) -> str:
    """``<exception type>: <first line>`` of the exception :func:`_guarded_call` recorded in ``man``."""
    extra = man.get("extra") or {}
    return f"{extra.get('exception')}: {extra.get('exception_message') or ''}".strip().rstrip(":")


def kernel_call(spec: KernelSpec, ops, given: Optional[dict] = None) -> Callable:
    """``spec.scaled_mm``, with ``block_size=`` bound for a block-scaled case (``GemmOperands.block_size``) and
    ``azp_adj=`` / ``azp=`` for an asymmetric one (``GemmOperands.zero_point``): the tensors of ``given`` (the copies
    handed to the kernel) when given, else the case's own."""
    bs = ops.block_size if isinstance(ops, GemmOperands) else ops
    fn = spec.scaled_mm if bs is None else functools.partial(spec.scaled_mm, block_size=tuple(bs))
    if isinstance(ops, GemmOperands) and ops.azp_adj is not None:
        src = given if given is not None else {"azp_adj": ops.azp_adj, "azp": ops.azp}
        fn = functools.partial(fn, azp_adj=src["azp_adj"], azp=src["azp"])
    return fn


def _guarded_call(man: dict, dev: str, fn: Callable, *args, **kwargs):
    """Call a kernel entry under ``trace.capture``: ``(result or None, error line or None, elapsed s,
    trace)``, the trace merged into ``man``; an error line is always an exception the call raised. Only a
    KeyboardInterrupt that is a stop propagates (``graceful_stop.stop_requested``: SIGINT or SIGTERM arrived, or
    this process cannot tell); one the kernel raised itself is its failure like any other exception."""
    t0 = time.perf_counter()
    with trace.capture() as t:
        try:
            out = fn(*args, **kwargs)
            _sync(dev)
            err = None
        except KeyboardInterrupt as e:
            if stop_requested():
                raise
            out, err = None, _raised(man, e)
        except BaseException as e:  # noqa: BLE001 -- incl. SystemExit
            out, err = None, _raised(man, e)
    elapsed = time.perf_counter() - t0
    _fill_from_trace(man, t)
    return out, err, elapsed, t


class KernelLaunch:
    """A ``scaled_mm`` call whose verdicts are asked, not read: ``output`` (well-formed output on its
    device, else None; judge it only from :meth:`result`), ``manifest``, ``error`` (failure known at call time)."""

    def __init__(self, spec, ops, output, error, manifest, elapsed, verdicts, digests, keep_on_device):
        self.spec, self.ops, self.output, self.error = spec, ops, output, error
        self.manifest, self.elapsed_s = manifest, elapsed
        self._verdicts, self._digests, self._keep = verdicts, digests, keep_on_device
        self.interface: Optional[str] = None  # set by start_kernel: KernelRun.interface known at call time
        self.raised: Optional[str] = None  # set by start_kernel: KernelRun.raised
        self._run: Optional[KernelRun] = None

    def result(self) -> KernelRun:
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
            return KernelRun(None, self.error, man, digests, self.elapsed_s, self.interface, self.raised)
        if mod_err is not None:  # an operand written in place: an interface failure, the output is not judged
            return KernelRun(None, mod_err, man, digests, self.elapsed_s, interface=mod_err)
        out = self.output if self._keep else self.output.to("cpu")
        # NaN evidence keeps the output: the checks may still want the other elements
        nan_err = _nan_error(out, self.ops, self.spec, man, n_nan[0] if n_nan else None)
        return KernelRun(out, nan_err, man, digests, self.elapsed_s)


#: Largest M * K * N whose kernel call is repeated for check C10 (call_independence).
OWNERSHIP_MAX_WORK = 1 << 25
#: The out dtype of C10's "other out dtype" call for each case out dtype.
OTHER_OUT_DTYPE = {torch.bfloat16: torch.float16, torch.float16: torch.bfloat16, torch.float32: torch.bfloat16}
_DTYPE_NAME = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def _same_storage(x: Tensor, y: Optional[Tensor]) -> bool:
    return (
        isinstance(y, Tensor)
        and x.device == y.device
        and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    )


def _other_values(given: dict) -> dict:
    """Copies of ``given`` (same layouts) holding other values: ``~x`` of int8 ``a`` / ``b`` (``-x`` of e4m3: a sign
    flip never makes a NaN), half the scales, ``-bias``."""
    other = {k: copy_keep_layout(v) for k, v in given.items()}
    for k in ("a", "b"):
        if other[k].dtype == E4M3:
            other[k].view(torch.uint8).bitwise_xor_(0x80)
        else:
            other[k].bitwise_not_()
    for k in ("scale_a", "scale_b"):
        other[k].mul_(0.5)
    if other["bias"] is not None:
        other["bias"].neg_()
    return other


def _other_form(s: Tensor) -> Tensor:
    """The same scale values in another legal form (a copy): 0-d -> [1], another one-element scale -> 0-d,
    [R] -> [R,1], [R,1] -> [R]."""
    c = copy_keep_layout(s)
    if c.dim() == 0:
        return c.reshape(1)
    if c.numel() == 1:
        return c.reshape(())
    return c.unsqueeze(1) if c.dim() == 1 else c.squeeze(1)


def _form(s: Tensor) -> str:
    return "0-d" if s.dim() == 0 else f"[{s.shape[0]}]" if s.dim() == 1 else f"[{s.shape[0]},1]"


def _sequence_variants(given: dict, out_dtype: torch.dtype, dense: frozenset) -> list:
    """C10's preceding calls that differ from the case in one attribute: ``(label, operands, out_dtype,
    same_result)``; ``same_result``: the call's bits must equal the case's (same values in another scale form)."""
    n = given["b"].shape[0]
    dt = OTHER_OUT_DTYPE[out_dtype]
    bias = given["bias"]
    if bias is not None:  # the case's bias in the other dtype, a value past its range as 0 (a bias is finite)
        bias = bias.to(dt).nan_to_num(posinf=0.0, neginf=0.0)
    dtype_ops = dict(given, bias=bias)
    flip = None if given["bias"] is not None else torch.ones(n, dtype=out_dtype, device=given["b"].device)
    forms = {k: _other_form(given[k]) for k in ("scale_a", "scale_b")}
    forms = {k: v.contiguous() if k in dense else v for k, v in forms.items()}
    form_label = ", ".join(f"{k} {_form(given[k])} -> {_form(v)}" for k, v in forms.items())
    return [
        (f"a call with out_dtype={_DTYPE_NAME[dt]} (the case's operands otherwise)", dtype_ops, dt, False),
        (
            f"a call {'without bias' if flip is None else 'with bias (ones)'} (the case's operands otherwise)",
            dict(given, bias=flip),
            out_dtype,
            False,
        ),
        (f"a call with the same scale values in another form ({form_label})", dict(given, **forms), out_dtype, True),
    ]


def _first_difference(first: Tensor, later: Tensor) -> dict:
    """``{"differing": count, "first": {"index": [i, j], "first_bits", "later_bits", "first_value",
    "later_value"}}`` for two [M,N] outputs of one dtype compared bit for bit (``first`` absent when equal)."""
    it = _INT_VIEW[first.element_size()]
    later = later.to(first.device)
    ne = first.view(it) != later.view(it)
    count = int(ne.sum())
    ev: dict = {"differing": count}
    if count:
        flat = int(ne.reshape(-1).nonzero()[0])
        i, j = divmod(flat, first.shape[1])
        width = 2 * first.element_size()
        bits = [int(t[i, j].view(it)) & ((1 << (8 * first.element_size())) - 1) for t in (first, later)]
        ev["first"] = {
            "index": [i, j],
            "first_bits": f"0x{bits[0]:0{width}x}",
            "later_bits": f"0x{bits[1]:0{width}x}",
            "first_value": float(first[i, j]),
            "later_value": float(later[i, j]),
        }
    return ev


def _probe_sequence(
    dev: str, spec: KernelSpec, given: dict, other: dict, first: Tensor, out_dtype, fn: Callable
) -> list:
    """C10's calls in sequence after the ownership call on ``other``: the case's values written in place into
    ``other`` and called; then, per :func:`_sequence_variants`, the variant and a replay of ``given``. Returns one
    step per compared call: ``after`` (the preceding call), ``compared`` (``replay`` / ``variant``), ``error`` or
    :func:`_first_difference`'s evidence against ``first``. A variant call (not the case's) whose output breaks the
    interface is ``interface`` (that line), not ``error``: the interface failure is judged on the cases of that
    variant, and C10 does not count it; the replay after it still runs."""
    m, n = first.shape

    def call(ops: dict, dt) -> tuple:
        """(output, error, interface line)."""
        args = (ops["a"], ops["b"], ops["scale_a"], ops["scale_b"])
        out, err, _, _ = _guarded_call(_base_manifest(spec, dev), dev, fn, *args, out_dtype=dt, bias=ops["bias"])
        return out, err, None if err else interface_violation(out, m, n, dt, "kernel")

    def compare(after: str, compared: str, ops: dict) -> dict:
        out, err, iface = call(ops, out_dtype)
        step = {"after": after, "compared": compared}
        step.update({"error": err or iface} if err or iface else _first_difference(first, out.detach()))
        return step

    written = [k for k, v in given.items() if v is not None]
    for k in written:
        other[k].copy_(given[k])
    inplace = f"the caller wrote the case's values in place into the previous call's {', '.join(written)}"
    steps = [compare(inplace, "replay", other)]
    for label, ops, dt, same in _sequence_variants(given, out_dtype, _dense_names(spec)):
        if spec.constraints.operand_violations(ops["scale_a"], ops["scale_b"], ops["bias"], dt):
            continue  # a call the kernel declares it does not take
        if same and ops["a"].dtype != E4M3:  # an e4m3 path may sum in another order
            steps.append(compare("the case's first call", f"variant: {label}", ops))
        else:
            _, err, iface = call(ops, dt)
            if err or iface:
                steps.append(
                    {
                        "after": "the case's first call",
                        "compared": f"variant: {label}",
                        "error": err,
                        "interface": iface,
                    }
                )
                if err:
                    continue
        steps.append(compare(label, "replay", given))
    return steps


def _probe_ownership(
    man: dict,
    dev: str,
    spec: KernelSpec,
    given: dict,
    out: Tensor,
    out_dtype: torch.dtype,
    sequence: bool,
    fn: Callable,
) -> Tensor:
    """C10 evidence in ``extra["ownership"]``: ``aliases`` (operands sharing the output's storage), then a second
    call on :func:`_other_values`: ``held_result_changed``, ``second_output_shares_storage``, ``second_call_error``;
    with ``sequence`` (and no failed second call), ``sequence``: :func:`_probe_sequence`'s steps. Returns the first
    call's output (a snapshot if a later call changed it)."""
    ev: dict = {"aliases": [k for k, v in given.items() if _same_storage(out, v)]}
    snap = out.detach().clone()
    other = _other_values(given)
    scratch = _base_manifest(spec, dev)
    args = (other["a"], other["b"], other["scale_a"], other["scale_b"])
    out2, err2, _, _ = _guarded_call(scratch, dev, fn, *args, out_dtype=out_dtype, bias=other["bias"])
    ev["second_call_error"] = err2
    ev["second_output_shares_storage"] = _same_storage(out, out2)
    it = _INT_VIEW[out.element_size()]
    changed = int((snap.view(it) != out.detach().view(it)).sum())
    ev["held_result_changed"] = changed
    if sequence and err2 is None:
        ev["sequence"] = _probe_sequence(dev, spec, given, other, snap, out_dtype, fn)
    man["extra"]["ownership"] = ev
    return snap if changed else out


def start_kernel(
    spec: KernelSpec,
    ops: GemmOperands,
    device: Optional[str] = None,
    keep_on_device: bool = False,
    probe_ownership: bool = False,
) -> KernelLaunch:
    """:func:`run_kernel` up to the call: verdicts asked, not read. ``probe_ownership``: record C10's
    evidence for cases up to :data:`OWNERSHIP_MAX_WORK` whose ``meta["ownership_probe"]`` is not False, with the
    calls in sequence where ``meta["sequence_probe"]`` is not False either."""
    m, k, n = validate_operands(
        ops.a,
        ops.b,
        ops.scale_a,
        ops.scale_b,
        ops.bias,
        ops.out_dtype,
        getattr(spec, "operands", "int8"),
        ops.block_size,
        ops.azp_adj,
        ops.azp,
    )
    dev, why = pick_device(spec, device)
    man = _base_manifest(spec, dev)
    if dev is None:
        man["skipped"] = True
        return KernelLaunch(spec, ops, None, f"not runnable here: {why}", man, 0.0, None, None, keep_on_device)
    shape_viol = spec.constraints.violations(m, k, n)
    viol = shape_viol + spec.block_violations(ops.block_size) + spec.azp_violations(ops.zero_point)
    viol += spec.constraints.operand_violations(
        ops.scale_a, ops.scale_b, ops.bias, ops.out_dtype, block=ops.block_size is not None
    )
    if viol:
        man["skipped"] = True
        man["extra"]["constraint_violations"] = viol
        what = "shape outside" if viol == shape_viol else "outside"
        why = f"not runnable here: {what} declared constraints: {'; '.join(viol)}"
        return KernelLaunch(spec, ops, None, why, man, 0.0, None, None, keep_on_device)
    dops = ops.to(dev)  # on the CPU these are the caller's own tensors: never hand them out
    originals = {"a": dops.a, "b": dops.b, "scale_a": dops.scale_a, "scale_b": dops.scale_b, "bias": dops.bias}
    if ops.azp_adj is not None:  # zero-point operands: handed as copies, in-place writes found like the others'
        originals.update(azp_adj=dops.azp_adj, azp=dops.azp)
    given = _clone_operands(originals, dense=_dense_names(spec))
    _record_layouts(man, originals, given)
    args = (given["a"], given["b"], given["scale_a"], given["scale_b"])
    fn = kernel_call(spec, ops, given)
    out, err, elapsed, t = _guarded_call(man, dev, fn, *args, out_dtype=dops.out_dtype, bias=given["bias"])
    raised = None if err is None else raised_text(man)
    iface = None if err is not None else interface_violation(out, m, n, ops.out_dtype, "kernel", given)
    err = err or iface
    if (
        err is None
        and probe_ownership
        and m * k * n <= OWNERSHIP_MAX_WORK
        and (ops.meta or {}).get("ownership_probe", True)
    ):
        # calls in sequence vary the scale forms: a block-scaled call has one; an asymmetric call's variants
        # would pair a changed b with the case's azp_adj
        sequence = (ops.meta or {}).get("sequence_probe", True) and ops.block_size is None and ops.azp_adj is None
        out = _probe_ownership(man, dev, spec, given, out, dops.out_dtype, sequence, fn)
    # the output's NaN count is asked with the in-place verdicts (one read-back)
    asked = (torch.isnan(out).sum(),) if err is None and out.is_floating_point() else ()
    verdicts = _ask_differing(originals, given, asked)

    def digests() -> dict:
        if t.received_digests:
            man["operands_recorded_by"] = "kernel"
            return t.received_digests
        # the originals are untouched, so this is what was handed over
        man["operands_recorded_by"] = "runner"
        return trace.digest_operands(dops.a, dops.b, dops.scale_a, dops.scale_b, dops.bias)

    if err is not None:
        launch = KernelLaunch(spec, ops, None, err, man, elapsed, verdicts, digests, keep_on_device)
        launch.interface, launch.raised = iface, raised
        return launch
    man["device"] = out.device.type
    return KernelLaunch(spec, ops, out.detach(), None, man, elapsed, verdicts, digests, keep_on_device)


def run_kernel(
    spec: KernelSpec, ops: GemmOperands, device: Optional[str] = None, keep_on_device: bool = False
) -> KernelRun:
    """Run ``spec.scaled_mm`` on copies of ``ops`` on ``device`` (None: CUDA if supported and present,
    else CPU). Output on the CPU, or where the kernel left it with ``keep_on_device``. Kernel failures go to
    ``error``; ``manifest["skipped"]`` when it cannot run here. Raises OperandError for invalid ``ops``."""
    return start_kernel(spec, ops, device, keep_on_device).result()


class AccLaunch:
    """An ``int_mm`` call whose in-place verdicts are asked, not read (as :class:`KernelLaunch`)."""

    def __init__(self, acc, error, manifest, elapsed, verdicts, keep_on_device):
        self.acc, self.error, self.manifest, self.elapsed_s = acc, error, manifest, elapsed
        self._verdicts, self._keep = verdicts, keep_on_device
        self._run: Optional[AccRun] = None

    def result(self) -> AccRun:
        if self._run is None and self._verdicts is None:
            self._run = AccRun(None, self.error, self.manifest)
        elif self._run is None:
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
    """:func:`run_int_mm` up to the call: in-place verdicts asked, not read."""
    m, _, n = validate_operands(a, b, _ONE, _ONE)
    dev, why = pick_device(spec, device)
    man = _base_manifest(spec, dev)
    if spec.int_mm is None or dev is None:
        man["skipped"] = True
        why = (
            f"kernel {spec.name!r} has no int_mm (accumulator-only) entry"
            if spec.int_mm is None
            else f"not runnable here: {why}"
        )
        return AccLaunch(None, why, man, 0.0, None, keep_on_device)
    originals = {k: v if v.device == torch.device(dev) else copy_keep_layout(v, dev) for k, v in (("a", a), ("b", b))}
    given = _clone_operands(originals, dense=_dense_names(spec))
    _record_layouts(man, originals, given)
    acc, err, elapsed, _ = _guarded_call(man, dev, spec.int_mm, given["a"], given["b"])
    verdicts = _ask_differing(originals, given)
    if err is None:
        err = interface_violation(acc, m, n, torch.int32, "int_mm", given)
    if err is not None:
        return AccLaunch(None, err, man, elapsed, verdicts, keep_on_device)
    man["device"] = acc.device.type
    return AccLaunch(acc.detach(), None, man, elapsed, verdicts, keep_on_device)


def run_int_mm(
    spec: KernelSpec, a: Tensor, b: Tensor, device: Optional[str] = None, keep_on_device: bool = False
) -> AccRun:
    """Run ``spec.int_mm(a, b)`` (a int8 [M,K], b int8 [N,K]) on copies: AccRun with int32 [M,N] or an
    error (no int_mm entry, exception, wrong output, operand modified). Raises OperandError for invalid a / b."""
    return start_int_mm(spec, a, b, device, keep_on_device).result()


def validate_device(device: Optional[str]) -> Optional[str]:
    """Check a user's ``--device`` (None, ``cpu``, ``cuda``, ``cuda:N``) and return it. Raises
    Int8confError (one line, ``reference.validate.check_device``): not a device, CUDA unavailable,
    index beyond the device count, another device type, or ``cpu:N`` with N > 0."""
    if device is not None:
        check_device(device, "--device", Int8confError)
    return device
