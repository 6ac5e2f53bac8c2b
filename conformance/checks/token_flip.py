"""Check C7 token_flip: teacher-forced replay of the model through a kernel.

Both arms run the same Qwen3 model on the same held-out windows, with every
decoder linear executed W8A8 (``reference.model.forward``) and the same int8
weights and scales:

* **reference arm**: ``reference.epilogue.reference_scaled_mm`` emulating the
  kernel's *declared* epilogue contract (``kernel.contract``);
* **kernel arm**: the kernel's ``scaled_mm``, called through
  ``conformance.kernels.runner.run_kernel`` (so device moves, padding and
  crash capture are the runner's).

Why the declared contract and not one fixed reference contract: integer
accumulation is exact, so a kernel that keeps its declared contract gives the
reference's output bit for bit in every layer, hence identical logits and
zero flips, whatever legal contract it declares. A fixed reference contract
would instead turn a *legal* 1-ulp epilogue difference into a cascade of
hidden-state differences through the blocks, and the check would then be
measuring the model's sensitivity rather than the kernel. Any flip here is
therefore caused by the kernel departing from its own declaration; the margin
threshold decides which of those departures matter end to end (the C7
question: "does it change what the model says?").

A **flip** is a position where the greedy next token (argmax, ties ->
smallest id) of the kernel arm differs from the reference arm's. It is
weighed by the reference arm's top-2 logit margin there: a flip at a
near-tie (margin of a few bf16 spacings) is what any perturbation, even the
final bf16 rounding of the logits, can cause; a flip at a large margin means
the kernel moved the logits by at least half that margin.

Default threshold (``margin_threshold=None``): the **legal-epilogue
envelope** of the run, in logit units, derived from the largest change a
conformant epilogue can make (:func:`legal_epilogue_envelope`).

Derivation. A conformant kernel may implement any legal epilogue: every
scale order (``a_then_w``, ``w_then_a``, ``fused``) and, when the model's
linears have a bias, either bias point, all with RNE (DESIGN.md section 3).
Such epilogues differ by at most one output spacing per element, and that
difference propagates through the blocks to the logits. Let ``l`` be the
declared-contract reference logits and ``l^c`` those of legal contract ``c``
(same model, weights, windows). At position ``p`` with reference top-1 token
``t``, the kernel arm flips ``t`` to some ``v`` only if it moves the logit
difference ``l_t - l_v`` by at least the reference margin ``m_p`` (``m_p <=
l_t - l_v`` for every ``v``). The largest change of such a difference a
legal epilogue makes at ``p`` is ``E_p(c) = max_v |(l^c_t - l^c_v) - (l_t -
l_v)| = max(d_t - min_v d_v, max_v d_v - d_t)`` with ``d = l^c - l``. The
threshold is ``T = max_c max_p E_p(c)`` over every legal contract other
than the declared one and every position of the windows: exact for these
windows (computed, not estimated). A legal epilogue cannot flip a token
whose reference margin exceeds ``T`` on these windows, so a flip at
``m_p > T`` is a change no conformant epilogue makes: ``fail``; flips at
``m_p <= T`` are within legal variation, reported, not failed (C8 still
fails a kernel that breaks its declaration by one bit). One absolute
threshold for every position (the margin unit is the logit, as the flip
condition ``m_p <= change`` is), replacing the earlier rule of 4 bf16
spacings of the position's top-1 logit, under which a flip at margin 0.1875
passed where one at 0.15625 failed. Cost: one extra forward pass per legal
contract plus one of the declared reference (3 for Qwen3, which has no
linear bias), cached per (model, scale mode, windows, contract). A float
``margin_threshold`` replaces ``T`` with an absolute threshold. ``T`` is a
property of the windows: on few, short windows legal epilogues may change
no logit at all (``T = 0``, measured on 4 x 32 tokens), and C7 then fails any
flip at a nonzero margin.

Calibration on the shipped default model (8 held-out windows x 128 tokens,
own scales, declared CUTLASS_STYLE reference, batch 8), measured 2026-11-30
with this code: the envelope is ``T = 0.25`` logit units (both other legal
scale orders, ``a_then_w`` and ``fused``, reach 0.25). Flips and their
largest reference margin:

* ``cpu`` kernel: 0 flips (bit-identical logits), pass;
* a kernel running another *legal* epilogue while declaring CUTLASS_STYLE
  (``a_then_w``: 6 flips, max margin 0.0625; ``fused``: 3 flips, max 0.0625):
  pass, as it must by construction (its changes are the envelope's);
* output truncation (F4, every element): 22 flips, max margin 0.1875, pass;
  double rounding (F2, every element): 18 flips, max 0.125, pass; a
  per-channel scale 1 % too large: 21 flips, max 0.25 (= T, not above),
  pass. End to end, these 1-ulp-class faults move the logits no more than a
  legal epilogue does, so C7 stays silent on them (the earlier claim
  "truncation stays silent under 4 spacings" held only by luck of the
  per-position spacing; here it holds by the derivation) and C8 / C5
  catch them bit-exactly;
* a stale activation operand or a 3 % scale error with truncation (the
  planted kernels of ``tests/conformance/checks/test_token_flip.py``): flips
  above T, fail.

Verdict: ``fail`` if any flip has a reference margin strictly above the
threshold, or the kernel errors; ``n/a`` if the kernel cannot run on this
machine; ``pass`` otherwise (flips below the threshold are reported, not
failed).
"""

from __future__ import annotations

import functools
import hashlib
import math
from pathlib import Path
from typing import Optional

import torch

from conformance.checks import CheckResult
from conformance.kernels.spec import KernelSpec
from reference.errors import Int8confError

CHECK_ID = "C7"
NAME = "token_flip"
#: Flip-margin bins (absolute logit units), lower edge inclusive.
MARGIN_BIN_EDGES = (0.0, 1e-3, 1e-2, 0.1, 1.0, math.inf)
#: Default window length (tokens) for the default model's held-out windows.
DEFAULT_WINDOW_LEN = 128
#: Flips listed individually in the evidence (the counts are complete).
MAX_LISTED_FLIPS = 50


def bin_label(lo: float, hi: float) -> str:
    """Label of a margin bin, e.g. ``"[0.01,0.1)"``."""
    return f"[{lo:g},{'inf' if math.isinf(hi) else format(hi, 'g')})"


def bf16_spacing(x: torch.Tensor) -> torch.Tensor:
    """Spacing (ulp) of bfloat16 at ``|x|``: the gap to the next larger bf16.

    Args:
        x: float32 tensor.

    Returns:
        float32 tensor, same shape: ``2**(floor(log2|x|) - 7)`` for normal
        values (bf16 has 8 significand bits incl. the implicit one; IEEE
        754-2019 section 3.3 with p = 8), ``2**-133`` (the subnormal spacing)
        for ``|x| < 2**-126`` including 0.
    """
    ax = x.abs().to(torch.float32)
    _, e = torch.frexp(ax)  # |x| = m * 2**e, m in [0.5, 1); frexp(0) gives e = 0
    e = torch.where(ax == 0, torch.full_like(e, -126), torch.clamp(e - 1, min=-126))
    return torch.ldexp(torch.ones_like(x, dtype=torch.float32), (e - 7).to(torch.float32))


# --------------------------------------------------------------------------
# model, weights and windows (cached: a sweep calls C7 for many kernels)
# --------------------------------------------------------------------------


def _resolve_model_dir(model_dir) -> Path:
    if model_dir is None:
        from reference.model.assets import default_model_dir

        model_dir = default_model_dir()
    return Path(model_dir).resolve()


def _dir_stamp(model_dir: Path) -> tuple:
    """(name, size, mtime_ns) of the files the model loads: a cache key that
    changes when the checkpoint on disk is rewritten."""
    out = []
    for p in sorted(model_dir.glob("*")):
        if p.suffix in (".safetensors", ".json") and p.is_file():
            st = p.stat()
            out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


@functools.lru_cache(maxsize=2)
def _model_and_weights(model_dir: str, scale_mode: str, stamp: tuple):
    from reference.model import forward as wf

    model = wf.load_model(model_dir)
    return model, wf.weights_for_scale_mode(model, scale_mode)


def _default_windows(model_dir: Path, n: int, length: int) -> torch.Tensor:
    from reference.model.corpus import eval_windows
    from reference.model.tokenizer import load_tokenizer

    return eval_windows(load_tokenizer(model_dir), n, length)


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


_REF_CACHE: dict = {}


def _reference_replay(key, model, weights, windows, contract, batch_size):
    """Reference arm, memoized on (model dir, scale mode, windows digest,
    contract, batch size): the sweep replays many kernels per contract."""
    if key not in _REF_CACHE:
        from reference.model import forward as wf

        ref_model, _ = wf.build_w8a8_model(model, weights, wf.reference_scaled_mm_for(contract))
        if len(_REF_CACHE) >= 8:
            _REF_CACHE.pop(next(iter(_REF_CACHE)))
        _REF_CACHE[key] = wf.teacher_forced(ref_model, windows, batch_size)
    return _REF_CACHE[key]


_ENV_CACHE: dict = {}


def legal_contracts(contract, has_bias: bool) -> list:
    """Every legal epilogue contract other than ``contract``: each scale order
    x (each bias point when the model's linears have a bias, else the declared
    one), rounding RNE (DESIGN.md section 3)."""
    from reference.contract import BIAS_POINTS, SCALE_ORDERS, EpilogueContract

    points = BIAS_POINTS if has_bias else (contract.bias_point,)
    out = [EpilogueContract(o, p) for o in SCALE_ORDERS for p in points]
    return [c for c in out if c.to_dict() != contract.to_dict()]


@torch.no_grad()
def legal_epilogue_envelope(model, weights, windows: torch.Tensor, contract, batch_size: int = 8) -> dict:
    """The largest change of a top-1 logit difference any *legal* epilogue
    makes on ``windows``: C7's default threshold (module docstring, derivation).

    Args:
        model: bf16 ``Qwen3ForCausalLM``.
        weights: ``{layer: QuantWeight}`` of the scale mode under test.
        windows: int64 ``[B, T]`` token ids.
        contract: the kernel's declared contract (the reference arm).
        batch_size: windows per forward pass.

    Returns:
        JSON-able dict: ``threshold`` (float, logit units: ``max_c max_p
        E_p(c)``), ``per_contract`` ({label: max_p E_p(c)}), ``argmax``
        ({"contract", "window", "position"} where the maximum is reached),
        ``contracts`` (labels), ``derivation`` (one line).
    """
    from reference.model import forward as wf

    has_bias = any(getattr(w, "bias", None) is not None for w in weights.values())
    legal = legal_contracts(contract, has_bias)
    ref_model, _ = wf.build_w8a8_model(model, weights, wf.reference_scaled_mm_for(contract))
    arms = {c.label(): wf.build_w8a8_model(model, weights, wf.reference_scaled_mm_for(c))[0] for c in legal}
    per = {lab: 0.0 for lab in arms}
    best = (-1.0, None, 0, 0)
    for i in range(0, windows.shape[0], batch_size):
        ids = windows[i : i + batch_size]
        lr = ref_model(input_ids=ids, use_cache=False).logits.float()  # exact bf16 upcast
        t1 = wf.argmax_smallest(lr)
        for lab, m in arms.items():
            d = m(input_ids=ids, use_cache=False).logits.float() - lr
            dt = d.gather(-1, t1[..., None])[..., 0]
            e = torch.maximum(dt - d.min(dim=-1).values, d.max(dim=-1).values - dt)  # [b, T]
            v = float(e.max())
            per[lab] = max(per[lab], v)
            if v > best[0]:
                w, p = divmod(int(e.argmax()), e.shape[1])
                best = (v, lab, i + w, p)
    thr = max(per.values()) if per else 0.0
    return {
        "threshold": thr,
        "per_contract": per,
        "contracts": list(per),
        "argmax": {"contract": best[1], "window": best[2], "position": best[3]},
        "derivation": "max over legal epilogues c != declared and positions p of "
        "max_v |delta_c(l_top1 - l_v)| (logit units)",
    }


def _envelope(key, model, weights, windows, contract, batch_size) -> dict:
    """Memoized :func:`legal_epilogue_envelope` (a sweep checks many kernels)."""
    if key not in _ENV_CACHE:
        if len(_ENV_CACHE) >= 8:
            _ENV_CACHE.pop(next(iter(_ENV_CACHE)))
        _ENV_CACHE[key] = legal_epilogue_envelope(model, weights, windows, contract, batch_size)
    return _ENV_CACHE[key]


# --------------------------------------------------------------------------
# kernel arm
# --------------------------------------------------------------------------


class KernelLayerFailure(Int8confError):
    """The kernel failed (``skipped=False``) or could not run
    (``skipped=True``: device missing, shape outside its constraints) on one
    layer of the model. Attributes ``layer``, ``error``, ``skipped``."""

    def __init__(self, kernel: str, layer: str, error: str, skipped: bool):
        first = (error or "no output").splitlines()[0]
        verb = "cannot run" if skipped else "failed on"
        super().__init__(f"kernel {kernel!r} {verb} {layer}: {first}")
        self.layer, self.error, self.skipped = layer, error or "no output", skipped


def kernel_layer_callables(
    kernel: KernelSpec,
    names,
    scale_mode: str = "own",
    device: Optional[str] = None,
    first_manifest: Optional[dict] = None,
) -> dict:
    """Adapt a kernel to ``reference.model.forward``'s ``scaled_mm`` callables.

    Each call goes through ``conformance.kernels.runner.run_kernel`` with a
    ``GemmOperands`` named after the layer (``meta``: block, proj, K, N,
    pow2_rule, source="token_flip"), so fault wrappers and traces see which
    layer runs.

    Args:
        kernel: the kernel.
        names: layer names (``reference.model.forward.linear_names``).
        scale_mode: ``own`` | ``pow2-nearest`` | ``pow2-ceiling`` (recorded
            as GemmOperands.scale_mode ``own`` / ``pow2``).
        device: passed to ``run_kernel``.
        first_manifest: if given, filled with the first call's run manifest.

    Returns:
        ``{layer name: scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)}``
        returning the kernel's CPU output.

    Raises (from the callables):
        KernelLayerFailure: the kernel errored or was skipped on a layer.
    """
    from conformance.kernels.runner import run_kernel
    from reference.operands import GemmOperands

    # GemmOperands knows "own" | "pow2"; the pow2 rule goes to meta.
    ops_mode = "own" if scale_mode == "own" else "pow2"
    rule = scale_mode.split("-", 1)[1] if scale_mode.startswith("pow2-") else None
    first = first_manifest if first_manifest is not None else {}

    def make(name):
        block, proj = name.split(".")[2], name.rsplit(".", 1)[1]

        def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
            ops = GemmOperands(
                a=a,
                b=b,
                scale_a=scale_a,
                scale_b=scale_b,
                bias=bias,
                out_dtype=out_dtype,
                name=name,
                scale_mode=ops_mode,
                meta={
                    "block": int(block),
                    "proj": proj,
                    "K": int(a.shape[1]),
                    "N": int(b.shape[0]),
                    "pow2_rule": rule,
                    "source": "token_flip",
                },
            )
            run = run_kernel(kernel, ops, device=device)
            if not first:
                first.update(run.manifest)
            if run.manifest.get("skipped"):
                raise KernelLayerFailure(kernel.name, name, run.error, skipped=True)
            if run.error is not None or run.output is None:
                raise KernelLayerFailure(kernel.name, name, run.error, skipped=False)
            return run.output

        return scaled_mm

    return {n: make(n) for n in names}


def _runs_here(kernel: KernelSpec) -> tuple[bool, str]:
    devs = tuple(kernel.devices)
    if "cpu" in devs or (("cuda" in devs) and torch.cuda.is_available()):
        return True, ""
    return False, f"kernel {kernel.name!r} runs on {list(devs)}; this machine has no such device"


# --------------------------------------------------------------------------
# comparison
# --------------------------------------------------------------------------


def compare_replays(ref, test, margin_threshold: float, threshold_desc: Optional[str] = None) -> dict:
    """Flip statistics between two teacher-forced replays of the same windows.

    Args:
        ref: ``reference.model.forward.TeacherForced`` of the reference arm.
        test: same, kernel arm (same windows, so same ``[B, T]`` shape).
        margin_threshold: absolute threshold in logit units (a flip whose
            reference margin is strictly above it counts as above threshold).
        threshold_desc: how the threshold was obtained (for the evidence).

    Returns:
        dict (JSON-able): ``total_positions``, ``flips``,
        ``flips_above_threshold``, ``bins`` ({label: {"positions", "flips"}},
        by reference margin), ``flip_list`` (first ``MAX_LISTED_FLIPS``:
        window, position, ref_token, kernel_token, ref_margin,
        ref_margin_spacings, threshold, above), ``max_flip_margin``,
        ``threshold`` (description), ``ppl_reference``, ``ppl_kernel``,
        ``max_abs_logit_margin_change``.
    """
    if ref.argmax.shape != test.argmax.shape:
        raise Int8confError(f"token_flip: replay shapes differ {tuple(ref.argmax.shape)} vs {tuple(test.argmax.shape)}")
    spacing = bf16_spacing(ref.top1)
    thr = torch.full_like(ref.margin, float(margin_threshold))
    thr_desc = threshold_desc or f"{float(margin_threshold):g} (absolute logit units)"
    flip = ref.argmax != test.argmax
    above = flip & (ref.margin > thr)
    bins = {}
    for lo, hi in zip(MARGIN_BIN_EDGES[:-1], MARGIN_BIN_EDGES[1:]):
        inb = (ref.margin >= lo) & (ref.margin < hi)
        bins[bin_label(lo, hi)] = {"positions": int(inb.sum()), "flips": int((inb & flip).sum())}
    idx = flip.nonzero().tolist()
    flip_list = []
    for w, p in idx[:MAX_LISTED_FLIPS]:
        m = float(ref.margin[w, p])
        flip_list.append(
            {
                "window": w,
                "position": p,
                "ref_token": int(ref.argmax[w, p]),
                "kernel_token": int(test.argmax[w, p]),
                "ref_margin": m,
                "ref_margin_spacings": m / float(spacing[w, p]),
                "threshold": float(thr[w, p]),
                "above": bool(above[w, p]),
            }
        )
    return {
        "total_positions": int(flip.numel()),
        "flips": int(flip.sum()),
        "flips_above_threshold": int(above.sum()),
        "threshold": thr_desc,
        "threshold_value": float(margin_threshold),
        "bins": bins,
        "flip_list": flip_list,
        "flip_list_truncated": len(idx) > MAX_LISTED_FLIPS,
        "max_flip_margin": float(ref.margin[flip].max()) if bool(flip.any()) else 0.0,
        "ppl_reference": ref.perplexity,
        "ppl_kernel": test.perplexity,
        "max_abs_top1_change": float((ref.top1 - test.top1).abs().max()),
    }


def check_token_flip(
    kernel: KernelSpec,
    model_dir=None,
    windows=8,
    window_len: int = DEFAULT_WINDOW_LEN,
    margin_threshold: Optional[float] = None,
    scale_mode: str = "own",
    batch_size: int = 8,
    device: Optional[str] = None,
) -> CheckResult:
    """C7 token_flip: kernel vs reference, teacher-forced, flips weighed by margin.

    Args:
        kernel: the kernel under test (its declared ``contract`` picks the
            reference arm's epilogue, see the module docstring).
        model_dir: Qwen3 directory (default: the shipped default model,
            ``reference.model.assets.default_model_dir()``).
        windows: number of held-out windows (``reference.model.assets.eval_windows``
            with the model's tokenizer), or an explicit int64 ``[B, T]``
            tensor of token ids.
        window_len: tokens per window when ``windows`` is a count.
        margin_threshold: None (default: the legal-epilogue envelope of these
            windows, :func:`legal_epilogue_envelope`) or an absolute logit
            threshold.
        scale_mode: ``own`` (per-channel scales of the reference quantizer,
            == the committed W8A8 checkpoint), ``pow2-nearest`` or
            ``pow2-ceiling`` (requantized from the parent weights).
        batch_size: windows per forward pass (same for both arms).
        device: passed to ``run_kernel`` (None: the runner's choice).

    Returns:
        ``CheckResult("C7", "token_flip", verdict, summary, evidence)``;
        evidence is :func:`compare_replays`'s dict plus ``legal_envelope`` (default
        threshold only: :func:`legal_epilogue_envelope`), ``reference_contract``,
        ``kernel``, ``kernel_manifest`` (first call's), ``scale_mode``,
        ``model_dir``, ``windows`` (shape) and ``windows_sha256``; on a kernel
        failure, ``kernel_error`` and ``failed_layer``.

    Summary line ends ``ppl reference(declared contract) X vs kernel Y``: the
    reference perplexity is that of the kernel's own declared contract, so
    it differs between kernels with different contracts.

    Raises:
        Int8confError subclasses for bad inputs (model dir, windows, scale
        mode, a window longer than the model's ``max_position_embeddings``).
    """
    from reference.model import forward as wf

    ok, why = _runs_here(kernel)
    if not ok:
        return CheckResult(CHECK_ID, NAME, "n/a", why, {"kernel": kernel.name})
    mdir = _resolve_model_dir(model_dir)
    stamp = _dir_stamp(mdir)
    model, weights = _model_and_weights(str(mdir), scale_mode, stamp)
    if isinstance(windows, torch.Tensor):
        win = windows  # teacher_forced checks T against the context
    else:
        wf.check_context(int(window_len), model.config, f"C7 window_len {int(window_len)}")
        win = _default_windows(mdir, int(windows), int(window_len))
    win = wf.check_windows(win, model.config.vocab_size)
    wf.check_context(win.shape[1], model.config, "C7 window length")
    wdig = _digest(win)
    contract = kernel.contract
    ref = _reference_replay(
        (str(mdir), stamp, scale_mode, wdig, contract, batch_size), model, weights, win, contract, batch_size
    )

    first_run: dict = {}
    names = wf.linear_names(model.config.num_hidden_layers)
    k_model, _ = wf.build_w8a8_model(
        model, weights, kernel_layer_callables(kernel, names, scale_mode, device, first_run)
    )
    base = {
        "kernel": kernel.name,
        "reference_contract": contract.to_dict(),
        "scale_mode": scale_mode,
        "model_dir": str(mdir),
        "windows": list(win.shape),
        "windows_sha256": wdig,
        "lm_head": "bf16 (not quantized, same in both arms)",
    }
    try:
        test = wf.teacher_forced(k_model, win, batch_size)
    except KernelLayerFailure as e:
        if e.skipped:
            ev = dict(base, kernel_manifest=first_run, skipped_layer=e.layer, reason=e.error)
            return CheckResult(CHECK_ID, NAME, "n/a", str(e), ev)
        ev = dict(base, kernel_manifest=first_run, kernel_error=e.error, failed_layer=e.layer)
        return CheckResult(CHECK_ID, NAME, "fail", str(e), ev)
    if margin_threshold is None:
        env = _envelope(
            (str(mdir), stamp, scale_mode, wdig, contract, batch_size), model, weights, win, contract, batch_size
        )
        thr = env["threshold"]
        desc = (
            f"{thr:g} = largest change of a top-1 logit difference by a legal epilogue "
            f"({', '.join(env['contracts'])}) on these windows"
        )
        base["legal_envelope"] = env
    else:
        thr, desc = float(margin_threshold), None
    ev = dict(base, kernel_manifest=first_run, **compare_replays(ref, test, thr, desc))
    n_above, n_flips, total = ev["flips_above_threshold"], ev["flips"], ev["total_positions"]
    verdict = "fail" if n_above else "pass"
    summary = (
        f"{n_flips} flip(s) in {total} positions, {n_above} above threshold "
        f"({ev['threshold']}); ppl reference(declared contract) {ev['ppl_reference']:.4f} vs kernel "
        f"{ev['ppl_kernel']:.4f}"
    )
    return CheckResult(CHECK_ID, NAME, verdict, summary, ev)
