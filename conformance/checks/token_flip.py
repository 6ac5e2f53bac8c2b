"""Check C7 token_flip: teacher-forced replay of the model through a kernel vs its declared contract.

A flip (greedy token differs) fails when its reference top-2 margin exceeds the
threshold: by default the legal-epilogue envelope ``T`` of the windows
(:func:`legal_epilogue_envelope`; derivation in README.md here), else
``margin_threshold`` in logit units. ``n/a`` when the kernel cannot run here.
"""

from __future__ import annotations

import functools
import hashlib
import math
from pathlib import Path
from typing import Optional

import torch

from conformance.cases.cache import cached_model_reference
from conformance.checks import CheckResult
from conformance.checks.result import Verdict
from conformance.kernels.runner import pick_device, run_kernel
from conformance.kernels.spec import KernelSpec, declared_epilogue
from reference.contract import BIAS_POINTS, SCALE_ORDERS, EpilogueContract
from reference.errors import Int8confError
from reference.operands import GemmOperands

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
    """float32, ``x``'s shape: the bf16 spacing at ``|x|``, ``2**(floor(log2|x|) - 7)``
    (p = 8, IEEE 754-2019 section 3.3), ``2**-133`` below ``2**-126`` and at 0."""
    ax = x.abs().to(torch.float32)
    _, e = torch.frexp(ax)  # |x| = m * 2**e, m in [0.5, 1); frexp(0) gives e = 0
    e = torch.where(ax == 0, torch.full_like(e, -126), torch.clamp(e - 1, min=-126))
    return torch.ldexp(torch.ones_like(x, dtype=torch.float32), (e - 7).to(torch.float32))


# model, weights and windows (cached: a sweep calls C7 for many kernels)


def _resolve_model_dir(model_dir) -> Path:
    if model_dir is None:
        from reference.model.assets import default_model_dir

        model_dir = default_model_dir()
    return Path(model_dir).resolve()


def _dir_stamp(model_dir: Path) -> tuple:
    """(name, size, mtime_ns) of the files the model loads: a cache key."""
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
_ENV_CACHE: dict = {}


def _bounded(cache: dict, key, compute):
    """``compute()`` memoized in ``cache`` on ``key`` (model dir, stamp, scale mode, windows digest, contract, batch),
    at most 8 entries (a sweep calls C7 for many kernels), and across runs in the artifact cache
    (``conformance.cases.cache.cached_model_reference``: a second run pays no reference forward)."""
    if key not in cache:
        if len(cache) >= 8:
            cache.pop(next(iter(cache)))
        kind = "replay" if cache is _REF_CACHE else "envelope"
        cache[key] = cached_model_reference(f"{kind}/{key!r}", compute)
    return cache[key]


def _reference_replay(key, model, weights, windows, contract, batch_size):
    from reference.model import forward as wf

    def replay():
        ref_model, _ = wf.build_w8a8_model(model, weights, wf.reference_scaled_mm_for(contract))
        return wf.teacher_forced(ref_model, windows, batch_size)

    return _bounded(_REF_CACHE, key, replay)


def legal_contracts(contract, has_bias: bool) -> list:
    """Every legal epilogue contract other than ``contract`` (scale orders x bias
    points when the model has a bias, else the declared one; DESIGN.md section 3)."""
    points = BIAS_POINTS if has_bias else (contract.bias_point,)
    out = [EpilogueContract(o, p) for o in SCALE_ORDERS for p in points]
    return [c for c in out if c.to_dict() != contract.to_dict()]


@torch.no_grad()
def legal_epilogue_envelope(model, weights, windows: torch.Tensor, contract, batch_size: int = 8) -> dict:
    """C7's default threshold ``T`` (module docstring) on ``windows`` (int64 [B, T])
    for the bf16 ``model`` with ``weights`` ({layer: QuantWeight}) and the declared
    ``contract``. JSON-able ``{threshold (logit units), per_contract, contracts,
    argmax {contract, window, position}, derivation}``."""
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
    return _bounded(_ENV_CACHE, key, lambda: legal_epilogue_envelope(model, weights, windows, contract, batch_size))


class KernelLayerFailure(Int8confError):
    """The kernel failed (``skipped=False``) or could not run (``skipped=True``)
    on one layer. Attributes ``layer``, ``error``, ``skipped``."""

    def __init__(self, kernel: str, layer: str, error: Optional[str], skipped: bool) -> None:
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
    """``{layer name: scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)}``: each call
    runs ``run_kernel`` on GemmOperands named after the layer and returns the CPU
    output or raises :class:`KernelLayerFailure`; ``first_manifest`` gets the first call's."""
    # GemmOperands knows "own" | "pow2"; the pow2 rule goes to meta.
    ops_mode = "own" if scale_mode == "own" else "pow2"
    rule = scale_mode.split("-", 1)[1] if scale_mode.startswith("pow2-") else None
    first = first_manifest if first_manifest is not None else {}

    def make(name):
        block, proj = name.split(".")[2], name.rsplit(".", 1)[1]

        def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
            meta = {"block": int(block), "proj": proj, "K": int(a.shape[1]), "N": int(b.shape[0]), "pow2_rule": rule}
            meta["source"] = "token_flip"
            ops = GemmOperands(a, b, scale_a, scale_b, bias, out_dtype, name, ops_mode, meta)
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


def compare_replays(ref, test, margin_threshold: float, threshold_desc: Optional[str] = None) -> dict:
    """JSON-able flip statistics between two ``TeacherForced`` replays of the same
    windows: ``total_positions, flips, flips_above_threshold`` (reference margin
    strictly above ``margin_threshold``, logit units), ``threshold``, ``bins`` by
    margin, ``flip_list`` (first :data:`MAX_LISTED_FLIPS`), ``max_flip_margin``,
    ``ppl_reference``, ``ppl_kernel``, ``max_abs_top1_change``."""
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
    """C7 (module docstring). ``model_dir``: Qwen3 directory (default: the shipped
    model); ``windows``: a count of held-out windows of ``window_len`` tokens or an
    int64 [B, T] tensor; ``margin_threshold``: None (the envelope) or logit units;
    ``scale_mode``: ``own`` | ``pow2-nearest`` | ``pow2-ceiling``. Evidence:
    :func:`compare_replays`' dict plus the run's identity. Int8confError for bad inputs."""
    from reference.model import forward as wf

    ok, why = _runs_here(kernel)
    if not ok:
        return CheckResult(CHECK_ID, NAME, Verdict.NOT_APPLICABLE, why, {"kernel": kernel.name})
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
    # the model's linear layers call with bf16 out on the device the kernel runs on
    contract = declared_epilogue(kernel, pick_device(kernel, device)[0], torch.bfloat16).contract
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
            return CheckResult(CHECK_ID, NAME, Verdict.NOT_APPLICABLE, str(e), ev)
        ev = dict(base, kernel_manifest=first_run, kernel_error=e.error, failed_layer=e.layer)
        return CheckResult(CHECK_ID, NAME, Verdict.FAIL, str(e), ev)
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
    verdict = Verdict.FAIL if n_above else Verdict.PASS
    summary = (
        f"{n_flips} flip(s) in {total} positions, {n_above} above threshold "
        f"({ev['threshold']}); ppl reference(declared contract) {ev['ppl_reference']:.4f} vs kernel "
        f"{ev['ppl_kernel']:.4f}"
    )
    return CheckResult(CHECK_ID, NAME, verdict, summary, ev)
