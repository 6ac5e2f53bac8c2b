"""Layer capture and replay: real W8A8 GEMM operands from a Qwen3 model.

For every decoder linear, capture records the inputs at fixed token positions of evaluation windows: ``x`` bf16
``[M, K]`` and its per-token quantization ``a`` int8 ``[M, K]`` / ``scale_a`` fp32 ``[M]``. Weights are referenced by
digest (derived checkpoints of :mod:`reference.model.artifacts`); replay refuses other digests. ``engine="f64"``
(default) runs a float64 forward and rounds each linear's input once to bf16, so the bits are machine-independent;
``engine="hf"`` hooks transformers. The f64 forward may run on a CUDA device (``device``; not recorded: the capture
is the same set, its derived checkpoints the same bytes): float64 results of two devices differ at most in their last
bits, and a captured bf16 value changes only if its float64 value lies within ~1e-16 relative of a bf16 rounding
boundary.

Files: one ``<layer>.safetensors`` per layer plus ``manifest.json``, rewritten atomically at most every
:data:`MANIFEST_SAVE_S` seconds while layers are written and at the end (an interrupted capture resumes from the layers
it lists)::

    model:       {digest, dir, num_hidden_layers, hidden_size, intermediate_size, ...}
    settings:    {engine, windows, window_len, positions, tokens_per_layer,
                  input_digest, token_source, activation_quantizer, raw_dtype}
    checkpoints: {own | pow2-nearest | pow2-ceiling: {digest, origin, scale_rule}}
    layers:      {name: {file, block, proj, M, K, N, digests{x,a,scale_a},
                  weights{kind: {b, scale_b}}, acc_absmax{kind}, acc_ge_2p24{kind},
                  zero_rows}}
    summary:     {layers, layers_acc_ge_2p24{kind}, max_acc_absmax{kind}}
    complete:    bool"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch

from reference import memo
from reference.accumulate import FP32_EXACT_INT
from reference.block.contract import check_block_size
from reference.block.quantize import quantize_activation_per_token_group, quantize_weight_blocks
from reference.errors import CaptureError, CheckpointError, ContractError, first_line
from reference.fileio import read_json_object
from reference.fp8.quantize import (
    quantize_activation_fp8_per_tensor,
    quantize_activation_fp8_per_token,
    quantize_weight_fp8_per_channel,
)
from reference.model.artifacts import (
    KINDS,
    build_code_digest,
    cache_dir,
    default_parent_dir,
    derived_checkpoint,
    load_parent,
    parent_digest,
)
from reference.model.checkpoint import (
    BLOCK_LINEARS,
    head_dim,
    layer_block_proj,
    linear_names,
    linear_shapes,
    load_safetensors_file,
    save_safetensors_atomic,
    write_json_atomic,
)
from reference.model.compressed_tensors import read_w8a8_checkpoint
from reference.model.corpus import eval_windows
from reference.model.tokenizer import load_tokenizer
from reference.operands import GemmOperands, tensor_digest
from reference.quantize import quantize_activation_per_token
from reference.validate import check_device

FORMAT = "int8conf-capture/1"
MANIFEST = "manifest.json"
DEFAULT_SETTINGS = {"windows": 4, "window_len": 128, "tokens_per_window": 16}
DEFAULT_MODEL_TAG = "<default>"
#: Seconds between manifest rewrites during a capture (each rewrites every layer's entry so far).
MANIFEST_SAVE_S = 1.0
_MODEL_KEYS = (
    "num_hidden_layers hidden_size intermediate_size num_attention_heads num_key_value_heads head_dim vocab_size"
)


@dataclass
class CaptureSet:
    """A loaded, digest-verified capture directory. ``model_dir``: the parent resolving the weight checkpoints (None:
    replay raises CaptureError); ``cache``: artifact cache; ``external``: ``{kind: checkpoint dir}`` not built."""

    dir: Path
    manifest: dict
    model_dir: Optional[Path] = None
    cache: Optional[Path] = None
    external: dict = field(default_factory=dict)
    _checkpoints: dict = field(default_factory=dict, repr=False)

    @property
    def model_digest(self) -> str:
        return self.manifest["model"]["digest"]

    def layer_names(self) -> list[str]:
        """Captured layer names in forward order."""
        return sorted(self.manifest["layers"], key=_layer_order_key)

    def load_layer(self, name: str) -> dict[str, torch.Tensor]:
        """``{"x" (if stored), "a", "scale_a"}`` of a layer, verified against the manifest; CaptureError: unknown layer,
        unreadable file or digest mismatch."""
        entry = self.manifest["layers"].get(name)
        if entry is None:
            raise CaptureError(f"{self.dir / MANIFEST}: no layer {name!r}")
        return _load_verified(self.dir, entry)

    def checkpoint(self, kind: str):
        """The W8A8 checkpoint ``kind`` the capture refers to, checked against the manifest's digest; CaptureError:
        unknown kind, no model to rebuild from, or another checkpoint."""
        if kind in self._checkpoints:
            return self._checkpoints[kind]
        rec = self.manifest["checkpoints"].get(kind)
        if rec is None:
            raise CaptureError(f"{self.dir / MANIFEST}: no checkpoint {kind!r} recorded")
        try:
            if kind in self.external:
                ck = read_w8a8_checkpoint(self.external[kind])
            else:
                if self.model_dir is None:
                    raise CaptureError(
                        f"{self.dir / MANIFEST}: parent model {self.manifest['model'].get('dir')!r} "
                        f"not found; pass model_dir to load_capture_set"
                    )
                ck = derived_checkpoint(self.model_dir, kind, self.cache)
        except CheckpointError as exc:
            raise CaptureError(f"{self.dir / MANIFEST}: checkpoint {kind!r}: {exc}") from None
        if ck.digest != rec["digest"]:
            raise CaptureError(
                f"{self.dir / MANIFEST}: checkpoint {kind!r} at {ck.dir} has digest "
                f"{ck.digest[:12]}, the capture was taken against {rec['digest'][:12]}"
            )
        self._checkpoints[kind] = ck
        return ck


def _layer_order_key(name: str) -> tuple:
    block, proj = layer_block_proj(name)
    order = [p.split(".")[1] for p in BLOCK_LINEARS]
    return block, order.index(proj) if proj in order else len(order)


def _digests(tensors: dict) -> dict:
    return {k: tensor_digest(v) for k, v in sorted(tensors.items())}


def _load_verified(cdir: Path, entry: dict) -> dict:
    path = cdir / entry["file"]
    try:
        tensors = load_safetensors_file(path)
    except CheckpointError as exc:
        raise CaptureError(str(exc)) from None
    want = entry["digests"]
    got = _digests(tensors)
    for key in sorted(set(want) | set(got)):
        if want.get(key) != got.get(key):
            raise CaptureError(
                f"{path}: tensor {key!r} digest {str(got.get(key))[:12]} does not match "
                f"manifest {str(want.get(key))[:12]}"
            )
    return tensors


def _read_manifest(cdir: Path) -> dict:
    path = cdir / MANIFEST
    man = read_json_object(path, CaptureError, "not a capture directory")
    if man.get("format") != FORMAT:
        raise CaptureError(f"{path}: format={man.get('format')!r}, expected {FORMAT!r}")
    for key in ("model", "settings", "checkpoints", "layers"):
        if not isinstance(man.get(key), dict):
            raise CaptureError(f"{path}: field {key!r} missing or not an object")
    return man


def check_capture_dir(capture_dir) -> None:
    """Raise CaptureError (one line naming the file) unless ``capture_dir`` holds a valid capture manifest; reads
    the manifest only (:func:`load_capture_set` verifies the layers): a command refuses before it makes folders."""
    _read_manifest(Path(capture_dir))


def _resolve_model_dir(man: dict, model_dir) -> Optional[Path]:
    if model_dir is not None:
        return Path(model_dir)
    recorded = man["model"].get("dir")
    if recorded == DEFAULT_MODEL_TAG:
        return default_parent_dir()
    if recorded and Path(recorded).is_dir():
        return Path(recorded)
    return None


def load_capture_set(capture_dir, model_dir=None, cache=None, verify: bool = True) -> CaptureSet:
    """The :class:`CaptureSet` of a capture directory. ``model_dir``: the parent to check against and rebuild weights
    from (default: the recorded one, or the shipped default model); ``verify``: check every layer file and the model
    digest.

    CaptureError (naming file and mismatch): missing / invalid manifest, incomplete capture, a layer file off its
    digests, or a model other than the captured one."""
    cdir = Path(capture_dir)
    man = _read_manifest(cdir)
    if not man.get("complete"):
        raise CaptureError(
            f"{cdir / MANIFEST}: capture incomplete ({len(man['layers'])} layers); "
            f"re-run `int8conf capture` to resume it"
        )
    mdir = _resolve_model_dir(man, model_dir)
    external = {
        k: Path(r["origin"][len("dir:") :])
        for k, r in man["checkpoints"].items()
        if str(r.get("origin", "")).startswith("dir:")
    }
    cs = CaptureSet(
        dir=cdir, manifest=man, model_dir=mdir, cache=Path(cache) if cache is not None else None, external=external
    )
    if verify:
        for name in cs.layer_names():
            _load_verified(cdir, man["layers"][name])
        if mdir is not None:
            try:
                got = parent_digest(mdir)
            except CheckpointError as exc:
                raise CaptureError(f"{cdir / MANIFEST}: model {mdir}: {exc}") from None
            if got != man["model"]["digest"]:
                raise CaptureError(
                    f"{cdir / MANIFEST}: capture is from model {man['model']['digest'][:12]}, "
                    f"but {mdir} has digest {got[:12]} (a different model)"
                )
    return cs


def default_captures_dir() -> Path:
    """``reference/model/assets/captures``."""
    return Path(__file__).resolve().parent / "assets" / "captures"


@functools.lru_cache(maxsize=1)
def _default_capture_set_cached(mtime_ns: int) -> CaptureSet:
    return load_capture_set(default_captures_dir())


def default_capture_set() -> Optional[CaptureSet]:
    """The shipped captures of the default model, verified (None if not built yet; CaptureError if inconsistent)."""
    path = default_captures_dir() / MANIFEST
    if not path.is_file():
        return None
    return _default_capture_set_cached(path.stat().st_mtime_ns)


def iter_layer_operands(cs: CaptureSet, scale_mode: str = "own", rule: str = "nearest") -> Iterator["GemmOperands"]:
    """Per-layer :class:`GemmOperands` (``a`` int8 [M, K], ``b`` int8 [N, K], fp32 scales, bf16 out, ``meta`` {block,
    proj, M, K, N, kind, rule, model_digest, capture_dir, acc_absmax, acc_ge_2p24, source}) in forward order, for
    ``scale_mode`` ``"own"`` or ``"pow2"`` (``rule`` ``"nearest"`` | ``"ceiling"``). CaptureError: bad mode / rule,
    unresolvable checkpoint or digest mismatch."""
    if scale_mode not in ("own", "pow2"):
        raise CaptureError(f"scale_mode={scale_mode!r} is not 'own' or 'pow2'")
    if scale_mode == "pow2" and rule not in ("nearest", "ceiling"):
        raise CaptureError(f"rule={rule!r} is not 'nearest' or 'ceiling'")
    kind = "own" if scale_mode == "own" else f"pow2-{rule}"
    ck = cs.checkpoint(kind)
    for name in cs.layer_names():
        entry = cs.manifest["layers"][name]
        t = cs.load_layer(name)
        # copies: a kernel or fault writing into its operands must not corrupt the cached checkpoint
        b = ck.weight(name).clone()
        sb = ck.scale_b(name).clone()
        ref = entry["weights"][kind]
        if tensor_digest(b) != ref["b"] or tensor_digest(sb) != ref["scale_b"]:
            raise CaptureError(
                f"{cs.dir / MANIFEST}: layer {name}: {kind} weight in {ck.dir} does not match the captured digests"
            )
        bias = ck.others.get(f"{name}.bias")
        bias = None if bias is None else bias.to(torch.bfloat16)
        meta = {k: entry[k] for k in ("block", "proj", "M", "K", "N")}
        meta.update(kind=kind, rule=rule if scale_mode == "pow2" else None, model_digest=cs.model_digest)
        meta.update(capture_dir=str(cs.dir), acc_absmax=entry["acc_absmax"][kind])
        meta.update(acc_ge_2p24=entry["acc_ge_2p24"][kind], source="capture")
        yield GemmOperands(t["a"], b, t["scale_a"], sb, bias, torch.bfloat16, name, scale_mode, meta)


def _parent_state(cs: CaptureSet) -> dict:
    """The float state dict of ``cs``'s parent model, checked against the captured model digest; CaptureError: no
    parent model, an unreadable one or another one."""
    if cs.model_dir is None:
        raise CaptureError(
            f"{cs.dir / MANIFEST}: parent model {cs.manifest['model'].get('dir')!r} not found; "
            f"pass model_dir to load_capture_set"
        )
    try:
        _config, state, digest = load_parent(cs.model_dir)
    except CheckpointError as exc:
        raise CaptureError(f"{cs.dir / MANIFEST}: model {cs.model_dir}: {exc}") from None
    if digest != cs.model_digest:
        raise CaptureError(
            f"{cs.dir / MANIFEST}: capture is from model {cs.model_digest[:12]}, "
            f"but {cs.model_dir} has digest {digest[:12]} (a different model)"
        )
    return state


def _raw_x(cs: CaptureSet, name: str) -> tuple[dict, torch.Tensor]:
    """(manifest entry, raw bf16 ``x`` [M, K]) of layer ``name``; CaptureError when the capture stores no ``x``."""
    entry = cs.manifest["layers"][name]
    t = cs.load_layer(name)
    if "x" not in t:
        raise CaptureError(f"{cs.dir / entry['file']}: layer {name} stores no raw x (capture with store_raw)")
    return entry, t["x"]


#: FP8 activation scale modes of :func:`iter_layer_operands_fp8` -> the ``scale_mode`` of their cases.
FP8_ACTIVATION_MODES = {"per_token": "fp8-token", "per_tensor": "fp8-tensor"}


def iter_layer_operands_fp8(cs: CaptureSet, activations: str = "per_token") -> Iterator["GemmOperands"]:
    """Per-layer FP8 :class:`GemmOperands` in forward order: the captured ``x`` bf16 [M, K] quantized to e4m3 per
    token (vLLM dynamic, ``scale_a`` fp32 [M]) or per tensor (``activations="per_tensor"``, ``scale_a`` fp32 [1]),
    the parent model's float weight [N, K] quantized to e4m3 per channel (compressed-tensors static; ``scale_b`` its
    bf16 scale widened exactly to fp32 [N]), the parent's bias (bf16) if any, bf16 out; ``scale_mode``
    :data:`FP8_ACTIVATION_MODES`; ``meta`` {block, proj, M, K, N, operands, activations, weights, model_digest,
    capture_dir, source}. CaptureError: bad mode, a capture without ``x``, no parent model or another one."""
    if activations not in FP8_ACTIVATION_MODES:
        raise CaptureError(f"activations={activations!r} is not one of {tuple(FP8_ACTIVATION_MODES)}")
    state = _parent_state(cs)
    quantize_x = quantize_activation_fp8_per_token if activations == "per_token" else quantize_activation_fp8_per_tensor
    for name in cs.layer_names():
        entry, x = _raw_x(cs, name)
        a, sa = quantize_x(x)
        b, sb = quantize_weight_fp8_per_channel(state[f"{name}.weight"])
        bias = state.get(f"{name}.bias")
        bias = None if bias is None else bias.to(torch.bfloat16)
        meta = {k: entry[k] for k in ("block", "proj", "M", "K", "N")}
        meta.update(operands="e4m3", activations=activations, weights="per_channel static (compressed-tensors)")
        meta.update(model_digest=cs.model_digest, capture_dir=str(cs.dir), source="capture")
        sb32 = sb.to(torch.float32).reshape(-1).contiguous()
        yield GemmOperands(a, b, sa, sb32, bias, torch.bfloat16, name, FP8_ACTIVATION_MODES[activations], meta)


#: Block scale modes of :func:`iter_layer_operands_block` (also the ``scale_mode`` of their cases) -> ``use_ue8m0``:
#: ``group`` the quantizers' real scales, ``group_ue8m0`` both scales rounded up to powers of two (C5 applies).
BLOCK_SCALE_MODES = {"group": False, "group_ue8m0": True}
#: ``operands`` of :func:`iter_layer_operands_block`: the quantizers' ``dtype``.
BLOCK_OPERANDS = ("int8", "e4m3")


def iter_layer_operands_block(
    cs: CaptureSet, operands: str = "int8", scales: str = "group", block: tuple = (128, 128)
) -> Iterator["GemmOperands"]:
    """Per-layer block-scaled :class:`GemmOperands` (``block_size=block`` = (bn, bk)) in forward order: the captured
    ``x`` bf16 [M, K] quantized per token and group of bk (``reference.block.quantize``, rule ``kernel``: vLLM's CUDA
    ``per_token_group_quant``; ``scale_a`` fp32 [M, ceil(K/bk)]), the parent model's float weight [N, K] in bn x bk
    blocks (compressed-tensors BLOCK; ``scale_b`` fp32 [ceil(N/bn), ceil(K/bk)]), ``operands`` int8 | e4m3, scales
    :data:`BLOCK_SCALE_MODES` (``group_ue8m0``: ``use_ue8m0`` on both), the parent's bias (bf16) if any, bf16 out.
    ``meta``: the FP8 iterator's keys, ``decoder_block`` the layer's decoder block, ``block`` the block-case attributes
    of ``conformance.cases.block`` (size, k multiple | tail r, ...), ``scale_kind`` real | pow2. CaptureError: bad
    operands / scales / block (no fallback to per-token scales), a capture without ``x``, no or another parent."""
    if operands not in BLOCK_OPERANDS:
        raise CaptureError(f"operands={operands!r} is not one of {BLOCK_OPERANDS}")
    if scales not in BLOCK_SCALE_MODES:
        raise CaptureError(f"scales={scales!r} is not one of {tuple(BLOCK_SCALE_MODES)}")
    try:
        bn, bk = check_block_size(block)
    except ContractError as exc:
        raise CaptureError(str(exc)) from None
    ue8m0 = BLOCK_SCALE_MODES[scales]
    state = _parent_state(cs)
    for name in cs.layer_names():
        entry, x = _raw_x(cs, name)
        a, sa = quantize_activation_per_token_group(x, bk, operands, rule="kernel", use_ue8m0=ue8m0)
        b, sb = quantize_weight_blocks(state[f"{name}.weight"], (bn, bk), operands, use_ue8m0=ue8m0)
        bias = state.get(f"{name}.bias")
        bias = None if bias is None else bias.to(torch.bfloat16)
        m, k, n = entry["M"], entry["K"], entry["N"]
        meta = {key: entry[key] for key in ("proj", "M", "K", "N")}
        meta.update(decoder_block=entry["block"], operands=operands, activations=f"per_token_group {bk} (vLLM kernel)")
        meta.update(weights=f"{bn}x{bk} blocks (compressed-tensors BLOCK)", scale_kind="pow2" if ue8m0 else "real")
        meta.update(model_digest=cs.model_digest, capture_dir=str(cs.dir), source="capture")
        meta["block"] = {
            "size": f"{bn}x{bk}",
            "m": "decode" if m < 128 else "prefill",
            "k": "multiple" if k % bk == 0 else f"tail {k % bk}",
            "n": "partial" if n % bn else "multiple",
            "magnitude": "ue8m0" if ue8m0 else "real",
            "layout": "row-major",
            "values": "capture",
        }
        yield GemmOperands(a, b, sa, sb, bias, torch.bfloat16, name, scales, meta, (bn, bk))


Hook = Callable[[str, torch.Tensor], None]


def _rope_theta(config: dict) -> float:
    rp = config.get("rope_parameters") or {}
    rs = config.get("rope_scaling") or {}
    rtype = rp.get("rope_type") or rs.get("rope_type") or rs.get("type") or "default"
    if rtype != "default":
        raise CaptureError(f"rope_type={rtype!r} is not supported by the f64 capture engine (use engine='hf')")
    theta = rp.get("rope_theta", config.get("rope_theta", 10000.0))
    return float(theta)


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # Qwen3RMSNorm: x * rsqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019).
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward_f64(
    config: dict, state: dict, input_ids: torch.Tensor, hook: Optional[Hook] = None, layers: Optional[set] = None
) -> torch.Tensor:
    """Float64 logits ``[B, T, vocab]`` of ``input_ids`` ``[B, T]`` (transformers ``modeling_qwen3`` semantics;
    ``state`` widened exactly), computed on ``input_ids``' device (``state`` best already there; the rotary tables are
    computed on the CPU). ``hook(layer name, input float64 [B, T, K])`` runs before every decoder linear; with
    ``layers``, the forward stops after the last block holding one of them and returns None. CaptureError: rope scaling
    or sliding-window attention in use."""
    if (
        config.get("use_sliding_window")
        and config.get("sliding_window")
        and input_ids.shape[1] > int(config["sliding_window"])
    ):
        raise CaptureError("sliding-window attention is not supported by the f64 capture engine")
    dev = input_ids.device
    f = lambda n: state[n].to(device=dev, dtype=torch.float64)  # noqa: E731
    eps = float(config.get("rms_norm_eps", 1e-6))
    nh = int(config["num_attention_heads"])
    nkv = int(config.get("num_key_value_heads") or nh)
    hd = head_dim(config)
    B, T = input_ids.shape
    inv_freq = 1.0 / (_rope_theta(config) ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dev), emb.sin().to(dev)
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1).to(dev)
    last_block = None
    if layers is not None:
        last_block = max(layer_block_proj(n)[0] for n in layers) if layers else -1

    def lin(name: str, x: torch.Tensor) -> torch.Tensor:
        if hook is not None:
            hook(name, x)
        y = x @ f(f"{name}.weight").T
        if f"{name}.bias" in state:
            y = y + f(f"{name}.bias")
        return y

    x = f("model.embed_tokens.weight")[input_ids]
    for i in range(int(config["num_hidden_layers"])):
        if last_block is not None and i > last_block:
            return None
        p = f"model.layers.{i}"
        h = _rms_norm(x, f(f"{p}.input_layernorm.weight"), eps)
        q = lin(f"{p}.self_attn.q_proj", h).view(B, T, nh, hd)
        k = lin(f"{p}.self_attn.k_proj", h).view(B, T, nkv, hd)
        v = lin(f"{p}.self_attn.v_proj", h).view(B, T, nkv, hd)
        q = _rms_norm(q, f(f"{p}.self_attn.q_norm.weight"), eps).transpose(1, 2)
        k = _rms_norm(k, f(f"{p}.self_attn.k_norm.weight"), eps).transpose(1, 2)
        v = v.transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
        o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, nh * hd)
        x = x + lin(f"{p}.self_attn.o_proj", o)
        h = _rms_norm(x, f(f"{p}.post_attention_layernorm.weight"), eps)
        g = lin(f"{p}.mlp.gate_proj", h)
        u = lin(f"{p}.mlp.up_proj", h)
        x = x + lin(f"{p}.mlp.down_proj", torch.nn.functional.silu(g) * u)
    if last_block is not None:
        return None
    x = _rms_norm(x, f("model.norm.weight"), eps)
    head = "lm_head.weight" if "lm_head.weight" in state else "model.embed_tokens.weight"
    return x @ f(head).T


def _forward_hf(model_dir, input_ids: torch.Tensor, hook: Hook, names: list[str], dtype) -> None:
    """transformers ``Qwen3ForCausalLM`` with pre-hooks on ``names``, one window at a time."""
    from transformers import Qwen3ForCausalLM

    try:
        model = Qwen3ForCausalLM.from_pretrained(str(model_dir), dtype=dtype, attn_implementation="eager")
    except Exception as exc:  # noqa: BLE001 -- transformers raises many types; one line for the user
        raise CaptureError(
            f"{model_dir}: transformers could not load the model ({exc.__class__.__name__}: {first_line(exc, None)})"
        ) from None
    model.eval()
    handles = [model.get_submodule(n).register_forward_pre_hook(lambda m, a, _n=n: hook(_n, a[0])) for n in names]
    try:
        with torch.no_grad():
            for w in range(input_ids.shape[0]):
                model(input_ids=input_ids[w : w + 1])
    finally:
        for h in handles:
            h.remove()


def token_positions(window_len: int, per_window: int) -> list[int]:
    """Positions captured per window: ``round(linspace(0, L-1, P))``, deduplicated."""
    if per_window < 1 or window_len < 1:
        raise CaptureError(f"tokens_per_window={per_window} and window_len={window_len} must be >= 1")
    idx = torch.linspace(0, window_len - 1, min(per_window, window_len), dtype=torch.float64).round().long()
    return sorted({int(i) for i in idx})


def _acc_stats(a: torch.Tensor, b: torch.Tensor, device="cpu") -> tuple[int, int]:
    """(max |acc|, count |acc| >= 2^24) of ``a @ b.T``, computed on ``device``; exact in float64 on any device and in
    any summation order since every partial sum is an integer of magnitude <= K * 2^14 < 2^53."""
    acc = a.to(device).to(torch.float64) @ b.to(device).to(torch.float64).T  # moved as int8, widened there
    absacc = acc.abs()
    stats = torch.stack([absacc.max(), (absacc >= FP32_EXACT_INT).sum().to(torch.float64)]).tolist()
    return int(stats[0]), int(stats[1])


def _settings(input_ids, source, engine, dtype, positions, store_raw) -> dict:
    (w, length), dtype_name = input_ids.shape, "float64" if engine == "f64" else str(dtype).replace("torch.", "")
    out = {"engine": engine, "engine_dtype": dtype_name, "windows": int(w), "window_len": int(length)}
    out |= {"positions": positions, "tokens_per_layer": int(w) * len(positions)}
    out |= {"input_digest": tensor_digest(input_ids.to(torch.int64).contiguous()), "token_source": source}
    out["activation_quantizer"] = "reference.quantize.quantize_activation_per_token"
    return out | {"raw_dtype": "bfloat16", "store_raw": bool(store_raw)}


def cached_capture(
    model_dir,
    *,
    windows: int = DEFAULT_SETTINGS["windows"],
    window_len: int = DEFAULT_SETTINGS["window_len"],
    tokens_per_window: int = DEFAULT_SETTINGS["tokens_per_window"],
    w8a8_dir=None,
    cache=None,
    store_raw: bool = True,
    device: str = "cpu",
    progress: Optional[Callable[[str], None]] = None,
) -> CaptureSet:
    """:func:`capture_model` of ``model_dir`` into the artifact cache, shared by every command that captures a model
    (``check --model``, ``sweep --model``, the study): ``<cache>/captures/<parent digest[:16]>-<build code
    digest[:8]>-<own | ext-NAME>-w<windows>x<tokens per window>[-raw]``, built once (resumed if interrupted), then
    loaded. Raises CaptureError / CheckpointError (one line)."""
    mdir = Path(model_dir)
    if not mdir.is_dir():
        raise CaptureError(f"{mdir}: not a model directory")
    tag = "own" if w8a8_dir is None else "ext-" + Path(w8a8_dir).resolve().name
    name = f"{parent_digest(mdir)[:16]}-{build_code_digest()[:8]}-{tag}-w{windows}x{tokens_per_window}"
    out = cache_dir(cache) / "captures" / (name + ("-raw" if store_raw else ""))
    cs = capture_model(
        mdir,
        out,
        windows=windows,
        window_len=window_len,
        tokens_per_window=tokens_per_window,
        w8a8_dir=w8a8_dir,
        cache=cache,
        store_raw=store_raw,
        progress=progress,
        device=device,
    )
    if cs is None:
        raise CaptureError(f"capture of {mdir} into {out} did not complete")
    return cs


@memo.scope()  # one scope per call: each tensor hashed once, the parent copied to ``device`` once
def capture_model(
    model_dir,
    out_dir,
    *,
    input_ids: Optional[torch.Tensor] = None,
    windows: int = DEFAULT_SETTINGS["windows"],
    window_len: int = DEFAULT_SETTINGS["window_len"],
    tokens_per_window: int = DEFAULT_SETTINGS["tokens_per_window"],
    w8a8_dir=None,
    cache=None,
    engine: str = "f64",
    dtype=torch.bfloat16,
    store_raw: bool = True,
    max_new_layers: Optional[int] = None,
    progress: Optional[Callable[[str], None]] = None,
    device: str = "cpu",
) -> Optional[CaptureSet]:
    """Capture every decoder linear's input of a float Qwen3 model into ``out_dir`` (resuming a partial capture of the
    same model and settings); the verified :class:`CaptureSet` when complete, else None (e.g. stopped by
    ``max_new_layers``).

    ``input_ids`` ``[W, L]`` defaults to held-out :func:`eval_windows`; ``w8a8_dir``: a W8A8 checkpoint to use as
    ``own``; ``store_raw``: also store ``x``; ``device``: where the f64 forward (weights copied there once) and the
    derived checkpoints' quantizers (``derived_checkpoint``) run (``cpu``, ``cuda``, ``cuda:N``); rounding to bf16,
    activation quantization and files stay on the CPU; the module docstring says why the bits are the CPU's.
    CheckpointError: bad model dir. CaptureError: ``out_dir`` holds another capture (untouched), bad ids, features or
    device (``engine="hf"`` runs on the CPU only)."""
    if engine not in ("f64", "hf"):
        raise CaptureError(f"engine={engine!r} is not 'f64' or 'hf'")
    dev = check_device(device, "device", CaptureError)
    if engine == "hf" and dev.type != "cpu":
        raise CaptureError(
            f"device {device!r}: engine='hf' runs on the CPU only (its bf16 forward is device-dependent)"
        )
    mdir = Path(model_dir)
    config, state, mdigest = load_parent(mdir)
    if "quantization_config" in config or "compression_config" in config:
        raise CaptureError(
            f"{mdir / 'config.json'}: has quantization_config; capture needs the float parent "
            f"model (pass the W8A8 checkpoint as w8a8_dir / --w8a8)"
        )
    source = "explicit"
    if input_ids is None:
        try:
            input_ids = eval_windows(load_tokenizer(mdir), windows, window_len)
        except CheckpointError as exc:
            raise CaptureError(f"{mdir}: cannot build evaluation windows ({exc})") from None
        source = "reference.model.corpus.eval_windows"
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.numel() == 0:
        raise CaptureError("input_ids must be a non-empty LongTensor [windows, length]")
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= int(config["vocab_size"]):
        raise CaptureError(
            f"token ids span [{int(input_ids.min())}, {int(input_ids.max())}], "
            f"outside the vocabulary of {mdir} (size {config['vocab_size']})"
        )
    input_ids = input_ids.to(torch.long)
    positions = token_positions(int(input_ids.shape[1]), tokens_per_window)
    settings = _settings(input_ids, source, engine, dtype, positions, store_raw)

    out = Path(out_dir)
    _check_existing(out, mdigest, settings)  # before any build: refuse early, touch nothing
    cks = {}
    if engine == "f64" and dev.type != "cpu":  # on the device once, for the quantizers and the forward (memo.moved)
        for v in state.values():
            memo.moved(v, dev)
    try:
        cks["own"] = derived_checkpoint(mdir, "own", cache, device)
        if w8a8_dir is not None:
            cks["own"] = read_w8a8_checkpoint(w8a8_dir)
        for kind in KINDS[1:]:
            cks[kind] = derived_checkpoint(mdir, kind, cache, device)
    except CheckpointError as exc:
        raise CaptureError(f"cannot build the weight checkpoints of {mdir}: {exc}") from None
    missing = [n for n in linear_names(config) if n not in cks["own"].weights]
    if missing:
        raise CaptureError(f"{cks['own'].dir}: linear {missing[0]} is not quantized (needed for replay)")
    shapes = linear_shapes(config)
    for n in linear_names(config):
        if tuple(cks["own"].weights[n].shape) != shapes[n]:
            raise CaptureError(
                f"{cks['own'].dir}: {n}.weight shape {list(cks['own'].weights[n].shape)} "
                f"does not match {mdir} ({list(shapes[n])})"
            )
    try:
        is_default = mdir.resolve() == default_parent_dir().resolve()
    except (OSError, RuntimeError):  # Path.resolve: unreadable path, symlink loop
        is_default = False
    model_rec = {key: config.get(key) for key in _MODEL_KEYS.split()}
    model_rec.update(digest=mdigest, dir=DEFAULT_MODEL_TAG if is_default else str(mdir.resolve()), model_type="qwen3")
    built = "built:reference.model.artifacts.derived_checkpoint"
    ck_rec = {k: {"digest": ck.digest, "scale_rule": k, "origin": built} for k, ck in cks.items()}
    if w8a8_dir is not None:
        ck_rec["own"]["origin"] = f"dir:{Path(cks['own'].dir).resolve()}"

    header = {"format": FORMAT, "model": model_rec, "settings": settings, "checkpoints": ck_rec}
    man = _resume_or_start(out, header)
    todo = [n for n in linear_names(config) if n not in man["layers"]][:max_new_layers]
    if todo:
        rows: dict[str, list] = {n: [] for n in todo}
        pos = torch.tensor(positions, device=dev)
        wanted = set(todo)

        def hook(name: str, x: torch.Tensor) -> None:
            if name in wanted:  # rounded to bf16 on the CPU, as on a CPU capture
                rows[name].append(x.detach()[:, pos, :].cpu().to(torch.bfloat16).reshape(-1, x.shape[-1]))

        with torch.no_grad():
            if engine == "f64":
                # the parent's tensors, shared (load_parent), are on the device once (memo.moved), never changed
                on_dev = {k: memo.moved(v, dev) for k, v in state.items()}
                for w in range(input_ids.shape[0]):
                    forward_f64(config, on_dev, input_ids[w : w + 1].to(dev), hook, layers=wanted)
                del on_dev
            else:
                _forward_hf(mdir, input_ids, hook, todo, dtype)
        saved = time.monotonic()
        for name in todo:
            x = torch.cat(rows.pop(name), dim=0).contiguous()
            a, sa = quantize_activation_per_token(x)
            zero_rows = int((sa == 0).sum())
            # an all-zero row has scale 0 (invalid for a GEMM); any scale gives its all-zero row: use 1.0
            sa = torch.where(sa == 0, torch.ones_like(sa), sa).contiguous()
            tensors = {"a": a, "scale_a": sa} | ({"x": x} if store_raw else {})
            fname = f"{name}.safetensors"
            save_safetensors_atomic(tensors, out / fname)
            block, proj = layer_block_proj(name)
            n_out, k_in = shapes[name]
            entry = {"file": fname, "block": block, "proj": proj, "M": int(a.shape[0]), "K": k_in, "N": n_out}
            entry.update(digests=_digests(tensors), zero_rows=zero_rows, weights={}, acc_absmax={}, acc_ge_2p24={})
            for kind, ck in cks.items():
                b = ck.weight(name)
                entry["weights"][kind] = {"b": tensor_digest(b), "scale_b": tensor_digest(ck.scale_b(name))}
                entry["acc_absmax"][kind], entry["acc_ge_2p24"][kind] = _acc_stats(a, b, dev)
            man["layers"][name] = entry
            if time.monotonic() >= saved + MANIFEST_SAVE_S:
                _save_manifest(man, out, len(linear_names(config)))
                saved = time.monotonic()
            if progress is not None:
                progress(f"{name}: M={entry['M']} K={k_in} N={n_out} max|acc| own={entry['acc_absmax']['own']}")
    _save_manifest(man, out, len(linear_names(config)))
    return load_capture_set(out, model_dir=mdir, cache=cache) if man["complete"] else None


def _save_manifest(man: dict, out: Path, n_layers: int) -> None:
    kinds, ls = list(man["checkpoints"]), man["layers"].values()
    man["complete"] = len(man["layers"]) == n_layers
    man["summary"] = {
        "layers": len(man["layers"]),
        "layers_acc_ge_2p24": {k: sum(1 for e in ls if e["acc_ge_2p24"][k] > 0) for k in kinds},
        "max_acc_absmax": {k: max((e["acc_absmax"][k] for e in ls), default=0) for k in kinds},
    }
    write_json_atomic(man, out / MANIFEST)


def _is_capture_file(p: Path) -> bool:
    """Hidden / temp files and layer files (a crash can leave one the manifest does not list)."""
    return p.name.startswith(".") or (p.name.startswith("model.layers.") and p.suffix == ".safetensors")


def _check_existing(out: Path, model_digest: str, settings: dict) -> Optional[dict]:
    """The manifest already in ``out`` (None if none); CaptureError if it is another model's or settings'."""
    path = out / MANIFEST
    if not path.is_file():
        return None
    man = _read_manifest(out)
    if man["model"].get("digest") != model_digest:
        raise CaptureError(
            f"{path}: holds a capture of model {str(man['model'].get('digest'))[:12]}, "
            f"not {model_digest[:12]}; use another output directory"
        )
    for key in sorted(set(man["settings"]) | set(settings)):
        if man["settings"].get(key) != settings.get(key):
            raise CaptureError(
                f"{path}: setting {key!r} is {man['settings'].get(key)!r} there, "
                f"{settings.get(key)!r} now; use another output directory"
            )
    return man


def _resume_or_start(out: Path, header: dict) -> dict:
    """The existing manifest with its verified layers, or a fresh one; CaptureError (directory untouched) for another
    model, settings or checkpoint digests."""
    path = out / MANIFEST
    if not path.is_file():
        if out.exists() and any(p for p in out.iterdir() if not _is_capture_file(p)):
            raise CaptureError(f"{out}: exists, is not empty and has no {MANIFEST}; refusing to write a capture there")
        out.mkdir(parents=True, exist_ok=True)
        return dict(header, layers={}, complete=False)
    man = _check_existing(out, header["model"]["digest"], header["settings"])
    for kind, rec in header["checkpoints"].items():
        if man["checkpoints"].get(kind, {}).get("digest") != rec["digest"]:
            raise CaptureError(
                f"{path}: checkpoint {kind!r} digest changed since the capture started "
                f"({man['checkpoints'].get(kind, {}).get('digest', '')[:12]} -> {rec['digest'][:12]})"
            )
    keep = {}
    for name, entry in man["layers"].items():
        try:
            _load_verified(out, entry)
            keep[name] = entry
        except CaptureError:
            pass  # damaged layer file: recapture it
    man["layers"] = keep
    return man


def remove_capture(capture_dir) -> int:
    """Delete a capture's layer files and manifest (nothing else) and return how many files went (0 without a manifest);
    CaptureError if the manifest is not an int8conf capture."""
    cdir, n = Path(capture_dir), 0
    if not (cdir / MANIFEST).is_file():
        return 0
    man = _read_manifest(cdir)
    files = {cdir / Path(e["file"]).name for e in man["layers"].values()}
    files |= {p for p in cdir.iterdir() if p.is_file() and _is_capture_file(p) and not p.name.startswith(".")}
    for f in sorted(files):
        if f.is_file():
            f.unlink()
            n += 1
    (cdir / MANIFEST).unlink()
    return n + 1
