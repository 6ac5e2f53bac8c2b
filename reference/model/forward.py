"""W8A8 forward of a Hugging Face Qwen3 causal LM through a plain ``scaled_mm``.

Every linear of every decoder block (``q_proj k_proj v_proj o_proj gate_proj
up_proj down_proj``) is replaced by a W8A8 linear:

    x (bf16 [..., K]) --quantize_activation_per_token--> a int8 [M, K], s_a fp32 [M]
    y = scaled_mm(a, W_q, s_a, s_w, out_dtype=x.dtype, bias)   -> bf16 [M, N]

with ``W_q`` int8 ``[N, K]`` and ``s_w`` fp32 ``[N]`` per-output-channel
(the scheme vLLM serves for compressed-tensors W8A8 checkpoints: static
per-channel int8 weights, dynamic per-token int8 activations). Everything
else (embedding, RMSNorm, QK-norm, RoPE, attention softmax, SwiGLU, residual
adds) runs as the bf16 model does.

The ``lm_head`` stays bf16, as in llm-compressor's W8A8 recipes, which put
``lm_head`` in ``ignore`` (here it is also tied to the input embedding).
Consequence: the final logits come from a bf16 matmul identical in every
arm; a kernel under test only touches the 7 x blocks decoder linears.

``scaled_mm`` is any callable ``(a, b, scale_a, scale_b, out_dtype, bias) ->
Tensor[M, N]``; the exact reference is :func:`reference_scaled_mm_for` (a
contract-bound ``reference.epilogue.reference_scaled_mm``). This module never
imports ``conformance``: kernels are adapted to that callable by the caller.

Public API
----------
* :func:`load_model` -- bf16 ``Qwen3ForCausalLM`` from a directory.
* :func:`linear_names` -- the 7 x blocks linear names.
* :func:`quantize_weights` / :func:`weights_for_scale_mode` -- ``{name:
  QuantWeight}`` from the parent weights (own or power-of-two scales);
  :func:`weights_from_tensors` -- from a compressed-tensors state dict.
* :func:`build_w8a8_model` -- a W8A8 copy of a model plus an :class:`AccStats`
  (per-layer max |acc|).
* :func:`reference_scaled_mm_for` -- the exact reference callable of a contract.
* :func:`check_context` -- reject sequences beyond ``max_position_embeddings``.
* :func:`teacher_forced` -- per-position argmax, top-2 margin, NLL.
* :func:`perplexity` -- exp(mean NLL) over evaluation windows.
* :func:`greedy_generate` -- greedy decoding with a KV cache.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

import torch
from torch import nn

from reference.accumulate import FP32_EXACT_INT, exact_int_mm  # 2**24 bound, exact acc
from reference.errors import CheckpointError, ContractError, OperandError, first_line
from reference.quantize import quantize_activation_per_token, quantize_weight_per_channel

# The 7 linears of a Qwen3 decoder block, in forward order (module path
# relative to ``model.layers.{i}``).
BLOCK_LINEARS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)


ScaledMM = Callable[..., torch.Tensor]


# --------------------------------------------------------------------------
# loading and weights
# --------------------------------------------------------------------------


def load_model(model_dir, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """Load a Hugging Face Qwen3 causal LM for inference.

    The directory is validated first with
    :func:`reference.model.checkpoint.load_qwen3_state` (every tensor the config
    implies present with the right shape), so a missing or misshapen tensor
    is a one-line CheckpointError -- never transformers' fallback of
    random-initializing it (its "MISSING ... newly initialized" report).
    transformers' own loading report and progress bar are silenced while it
    loads; anything it still finds missing or mismatched is also an error.

    Args:
        model_dir: directory with ``config.json`` (``model_type`` ``qwen3``)
            and safetensors weights (single or sharded).
        dtype: parameter dtype (default bf16, the dtype W8A8 serving uses for
            every non-quantized op).

    Returns:
        ``transformers.Qwen3ForCausalLM`` in eval mode on CPU.

    Raises:
        CheckpointError: directory or config.json missing, not a Qwen3 model,
            a required tensor missing or of the wrong shape (names file and
            tensor), or the weights fail to load (message names the directory).
    """
    from transformers import Qwen3ForCausalLM

    from reference.model.checkpoint import load_qwen3_state

    d = Path(model_dir)
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{cfg_path}: no config.json; not a model directory")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{cfg_path}: unreadable config ({e})") from None
    if not isinstance(cfg, dict) or cfg.get("model_type") != "qwen3":
        got = cfg.get("model_type") if isinstance(cfg, dict) else type(cfg).__name__
        raise CheckpointError(f"{cfg_path}: model_type={got!r}, expected 'qwen3'")
    # The one checkpoint validator (CheckpointError naming file and tensor);
    # the tensors themselves are dropped, transformers reads them again.
    load_qwen3_state(d)
    with _quiet_transformers():
        try:
            model, info = Qwen3ForCausalLM.from_pretrained(str(d), dtype=dtype, output_loading_info=True)
        except Exception as e:  # one line instead of a deep transformers traceback
            msg = first_line(e, None) or type(e).__name__
            raise CheckpointError(f"{d}: cannot load Qwen3 weights ({msg})") from None
    for key, what in (("missing_keys", "missing"), ("mismatched_keys", "has a mismatched shape")):
        bad = sorted(info.get(key) or [], key=str)
        if bad:
            name = bad[0][0] if isinstance(bad[0], (tuple, list)) else bad[0]
            raise CheckpointError(
                f"{d}: tensor {name!r} {what} ({len(bad)} such; transformers would have initialized them randomly)"
            )
    return model.eval()


class _quiet_transformers:
    """Context: transformers logging at ERROR and no progress bar (restored
    on exit), so loading prints no multi-line report or "Loading weights" bar."""

    def __enter__(self):
        from transformers.utils import logging as hf_logging

        self._hf = hf_logging
        self._level = hf_logging.get_verbosity()
        self._bar = hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        return self

    def __exit__(self, *exc):
        self._hf.set_verbosity(self._level)
        if self._bar:
            self._hf.enable_progress_bar()
        return False


def linear_names(num_layers: int) -> list[str]:
    """Names of the W8A8 linears, ``model.layers.{i}.{proj}``, block-major.

    Args:
        num_layers: number of decoder blocks (``config.num_hidden_layers``).

    Returns:
        ``7 * num_layers`` module names in forward order.
    """
    return [f"model.layers.{i}.{p}" for i in range(num_layers) for p in BLOCK_LINEARS]


@dataclass
class QuantWeight:
    """One linear's W8A8 weight.

    Attributes:
        q: int8 ``[N, K]`` weight (nn.Linear layout).
        scale: float32 ``[N]`` per-output-channel scale (``W ~= q * scale``).
        bias: optional ``[N]`` bias in the model dtype (Qwen3 has none).
    """

    q: torch.Tensor
    scale: torch.Tensor
    bias: Optional[torch.Tensor] = None


def as_quant_weight(
    q: torch.Tensor, scale: torch.Tensor, bias: Optional[torch.Tensor] = None, name: str = ""
) -> QuantWeight:
    """Validate and normalize a ``(q, scale)`` pair into a :class:`QuantWeight`.

    Args:
        q: int8 ``[N, K]``.
        scale: ``[N]``, ``[N, 1]`` (any float dtype; converted to float32,
            exact for bf16/fp16 scales, as vLLM stores ``weight_scale`` in
            float32).
        bias: optional ``[N]``.
        name: layer name for error messages.

    Raises:
        OperandError: wrong dtype or shape (one line naming the layer).
    """
    if q.dtype != torch.int8 or q.dim() != 2:
        raise OperandError(f"{name}: weight must be int8 [N,K], got {q.dtype} {tuple(q.shape)}")
    n = q.shape[0]
    if (
        not scale.is_floating_point()
        or scale.numel() != n
        or (scale.dim() == 2 and scale.shape[1] != 1)
        or scale.dim() > 2
    ):
        raise OperandError(
            f"{name}: weight scale must be float [N] or [N,1] with N={n}, got {scale.dtype} {tuple(scale.shape)}"
        )
    return QuantWeight(q.contiguous(), scale.reshape(n).to(torch.float32).contiguous(), bias)


def quantize_weights(model: nn.Module, quantizer: Optional[Callable] = None) -> dict[str, QuantWeight]:
    """Quantize every decoder linear of ``model`` from its parent weights.

    Args:
        model: a ``Qwen3ForCausalLM`` (bf16 parents).
        quantizer: ``(w [N,K] float) -> (q int8 [N,K], scale [N,1] or [N])``;
            default ``reference.quantize.quantize_weight_per_channel`` (own
            scales, llm-compressor's rule). For power-of-two scales pass e.g.
            ``lambda w: reference.model.pow2.requantize_pow2(w, rule="nearest")``
            (requantization from the parent, never a scale rewrite).

    Returns:
        ``{layer name: QuantWeight}`` for all ``7 * blocks`` linears.
    """
    if quantizer is None:
        quantizer = quantize_weight_per_channel
    out = {}
    mods = dict(model.named_modules())
    for name in linear_names(model.config.num_hidden_layers):
        lin = mods[name]
        q, s = quantizer(lin.weight.detach())
        out[name] = as_quant_weight(q, s, None if lin.bias is None else lin.bias.detach(), name)
    return out


SCALE_MODES = ("own", "pow2-nearest", "pow2-ceiling")


def weights_for_scale_mode(model: nn.Module, scale_mode: str = "own") -> dict[str, QuantWeight]:
    """W8A8 weights of ``model`` in one scale mode, all from the parent weights.

    Args:
        model: bf16 ``Qwen3ForCausalLM``.
        scale_mode: ``own`` -- ``reference.quantize.quantize_weight_per_channel``
            (byte-identical to the committed compressed-tensors checkpoint, as
            the reconstruction gate proves); ``pow2-nearest`` /
            ``pow2-ceiling`` -- ``reference.model.pow2.requantize_pow2(w, rule)``
            (per-channel scale snapped to a power of two, weights requantized
            from the parent -- never a scale rewrite, which is fault F9).

    Raises:
        ContractError: unknown scale mode.
    """
    if scale_mode == "own":
        return quantize_weights(model)
    if scale_mode in ("pow2-nearest", "pow2-ceiling"):
        from reference.model.pow2 import requantize_pow2

        rule = scale_mode.split("-", 1)[1]
        return quantize_weights(model, lambda w: requantize_pow2(w, rule=rule))
    raise ContractError(f"scale_mode={scale_mode!r} is not one of {SCALE_MODES}")


def weights_from_tensors(tensors: Mapping[str, torch.Tensor], num_layers: int) -> dict[str, QuantWeight]:
    """Build the weight map from a compressed-tensors style state dict.

    Args:
        tensors: ``{"<layer>.weight": int8 [N,K], "<layer>.weight_scale":
            [N,1] float, optional "<layer>.bias"}`` -- the layout of a vLLM
            compressed-tensors W8A8 checkpoint (``reference.model.checkpoint``).
        num_layers: decoder blocks.

    Raises:
        CheckpointError: a layer's weight or weight_scale is missing.
        OperandError: wrong dtype/shape.
    """
    out = {}
    for name in linear_names(num_layers):
        w, s = tensors.get(f"{name}.weight"), tensors.get(f"{name}.weight_scale")
        if w is None or s is None:
            missing = f"{name}.weight" if w is None else f"{name}.weight_scale"
            raise CheckpointError(f"W8A8 tensors: missing {missing}")
        out[name] = as_quant_weight(w, s, tensors.get(f"{name}.bias"), name)
    return out


# --------------------------------------------------------------------------
# the W8A8 model
# --------------------------------------------------------------------------


@dataclass
class AccStats:
    """Largest |accumulator| seen per linear (exact int64), when tracked.

    Attributes:
        max_abs_acc: ``{layer name: max |A_q @ W_q^T|}`` over every call.
        max_k: ``{layer name: K}``.
    """

    max_abs_acc: dict = field(default_factory=dict)
    max_k: dict = field(default_factory=dict)

    def layers_at_or_above(self, bound: int = FP32_EXACT_INT) -> list[str]:
        """Layers whose observed max |acc| >= ``bound`` (default 2^24)."""
        return [n for n, v in self.max_abs_acc.items() if v >= bound]


class W8A8Linear(nn.Module):
    """Drop-in for ``nn.Linear`` that runs as W8A8 through ``scaled_mm``.

    Input ``x`` float ``[..., K]`` -> per-token int8 quantization
    (``reference.quantize.quantize_activation_per_token``) -> ``scaled_mm``
    -> ``[..., N]`` in ``x.dtype`` (bf16 for the default model).
    Rows are independent, so results do not depend on batch composition as
    long as ``scaled_mm`` is row-independent (every correct kernel is).
    """

    def __init__(self, name: str, weight: QuantWeight, scaled_mm: ScaledMM, stats: Optional[AccStats] = None):
        super().__init__()
        self.name = name
        self.qweight = weight
        self.scaled_mm = scaled_mm
        self.stats = stats
        self.in_features = weight.q.shape[1]
        self.out_features = weight.q.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        a, s_a = quantize_activation_per_token(x2)
        # An all-zero row quantizes to q = 0 with scale 0, which scaled_mm
        # rejects; any non-zero scale gives the same all-zero row (acc = 0).
        s_a = torch.where(s_a == 0, torch.ones_like(s_a), s_a)
        w = self.qweight
        y = self.scaled_mm(a, w.q, s_a, w.scale, x.dtype, w.bias)
        if self.stats is not None:
            m = int(exact_int_mm(a, w.q).abs().max())
            prev = self.stats.max_abs_acc.get(self.name, 0)
            self.stats.max_abs_acc[self.name] = max(prev, m)
            self.stats.max_k[self.name] = self.in_features
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:  # noqa: D102
        return f"{self.name}: K={self.in_features}, N={self.out_features}, W8A8"


def build_w8a8_model(
    model: nn.Module,
    weights: Mapping[str, QuantWeight],
    scaled_mm: ScaledMM | Mapping[str, ScaledMM],
    track_acc: bool = False,
) -> tuple[nn.Module, Optional[AccStats]]:
    """A copy of ``model`` whose decoder linears run W8A8 through ``scaled_mm``.

    Args:
        model: bf16 ``Qwen3ForCausalLM`` (not modified).
        weights: ``{layer name: QuantWeight}`` for every name in
            :func:`linear_names` (from :func:`quantize_weights`,
            :func:`weights_from_tensors`, or a pow2 requantization).
        scaled_mm: ``(a int8 [M,K], b int8 [N,K], scale_a fp32 [M], scale_b
            fp32 [N], out_dtype, bias) -> Tensor[out_dtype][M,N]``, or a
            mapping ``{layer name: such callable}`` (lets a harness tag each
            call with its layer).
        track_acc: also compute the exact int64 accumulator of every call
            (``reference.accumulate.exact_int_mm``, doubles the integer work)
            and record the per-layer max |acc|.

    Returns:
        ``(w8a8_model, stats)``; stats is None unless ``track_acc``.
        ``lm_head`` (tied embedding) stays bf16.

    Raises:
        CheckpointError: a layer is missing from ``weights``.
        OperandError: a weight's shape does not match the model's linear.
    """
    stats = AccStats() if track_acc else None
    names = linear_names(model.config.num_hidden_layers)
    missing = [n for n in names if n not in weights]
    if missing:
        raise CheckpointError(f"W8A8 weights: missing layer {missing[0]} ({len(missing)} missing)")
    # Copy everything except the bf16 linear weights that are about to be replaced.
    mods = dict(model.named_modules())
    memo = {id(mods[n].weight): None for n in names}
    w8 = copy.deepcopy(model, memo)
    w8_mods = dict(w8.named_modules())
    for n in names:
        lin, qw = mods[n], weights[n]
        if tuple(qw.q.shape) != (lin.out_features, lin.in_features):
            raise OperandError(
                f"{n}: W8A8 weight shape {tuple(qw.q.shape)} != linear [{lin.out_features},{lin.in_features}]"
            )
        parent_name, _, attr = n.rpartition(".")
        fn = scaled_mm[n] if isinstance(scaled_mm, Mapping) else scaled_mm
        setattr(w8_mods[parent_name], attr, W8A8Linear(n, qw, fn, stats))
    return w8.eval(), stats


def reference_scaled_mm_for(contract) -> ScaledMM:
    """The exact reference ``scaled_mm`` for one declared epilogue contract.

    Args:
        contract: ``reference.contract.EpilogueContract``.

    Returns:
        callable ``(a, b, scale_a, scale_b, out_dtype, bias)`` ->
        ``reference.epilogue.reference_scaled_mm(..., contract, bias, out_dtype)``
        (exact int accumulator, IEEE float32 epilogue, one RNE rounding).
    """
    from reference.epilogue import reference_scaled_mm  # lazy: only the reference arm needs it

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return reference_scaled_mm(a, b, scale_a, scale_b, contract, bias=bias, out_dtype=out_dtype)

    scaled_mm.contract = contract
    return scaled_mm


# --------------------------------------------------------------------------
# evaluation: teacher forcing, perplexity, greedy decoding
# --------------------------------------------------------------------------


@dataclass
class TeacherForced:
    """Per-position outputs of a teacher-forced pass over token windows.

    Position ``t`` of window ``b`` is the prediction after reading
    ``windows[b, :t+1]`` (teacher forcing: the true tokens are fed, never the
    model's own choices).

    Attributes:
        argmax: int64 ``[B, T]`` greedy next token (ties -> smallest id).
        margin: float32 ``[B, T]`` top-1 minus top-2 logit (0 at an exact tie),
            logits in the model's output dtype (bf16) read exactly as float32.
        top1: float32 ``[B, T]`` largest logit (sets the bf16 spacing scale).
        nll: float32 ``[B, T-1]`` ``-log softmax(logits[t])[windows[t+1]]``,
            log-softmax computed in float32 (as HF's causal-LM loss does).
    """

    argmax: torch.Tensor
    margin: torch.Tensor
    top1: torch.Tensor
    nll: torch.Tensor

    @property
    def perplexity(self) -> float:
        """exp(mean NLL) over every predicted position (mean taken in float64)."""
        return math.exp(self.nll.double().mean().item())


def argmax_smallest(logits: torch.Tensor) -> torch.Tensor:
    """Argmax over the last dim with ties broken toward the smallest index.

    Args:
        logits: float ``[..., V]``.

    Returns:
        int64 ``[...]``. (Explicit rather than relying on torch.argmax's
        tie behaviour, which is only documented for CPU.)
    """
    mx = logits.max(dim=-1, keepdim=True).values
    v = logits.shape[-1]
    idx = torch.arange(v, device=logits.device).expand_as(logits)
    return torch.where(logits == mx, idx, torch.full_like(idx, v)).min(dim=-1).values


def check_windows(windows: torch.Tensor, vocab: int) -> torch.Tensor:
    """Validate evaluation windows: int64/int32 ``[B, T]``, B >= 1, T >= 2,
    ids in ``[0, vocab)``. Returns them as int64. Raises OperandError (one line)."""
    if not isinstance(windows, torch.Tensor) or windows.dim() != 2 or windows.dtype not in (torch.int64, torch.int32):
        raise OperandError(
            f"windows must be an int64 [B, T] tensor, got "
            f"{getattr(windows, 'dtype', type(windows).__name__)} "
            f"{tuple(getattr(windows, 'shape', ()))}"
        )
    if windows.shape[1] < 2 or windows.shape[0] < 1:
        raise OperandError(f"windows must have B >= 1 and T >= 2, got {tuple(windows.shape)}")
    if int(windows.min()) < 0 or int(windows.max()) >= vocab:
        raise OperandError(f"windows hold token ids outside [0, {vocab})")
    return windows.long()


def context_length(config) -> Optional[int]:
    """The model's context in tokens: ``max_position_embeddings`` of a
    transformers config object or a ``config.json`` dict (None if absent)."""
    v = (
        config.get("max_position_embeddings")
        if isinstance(config, Mapping)
        else getattr(config, "max_position_embeddings", None)
    )
    return int(v) if isinstance(v, int) and v > 0 else None


def check_context(n_tokens: int, config, what: str = "window") -> None:
    """Reject a sequence longer than the model's context.

    Positions past ``max_position_embeddings`` lie outside what the model's
    rotary position range was configured (and trained) for; a perplexity or
    a continuation there measures extrapolation, not the kernel.

    Args:
        n_tokens: tokens the run feeds through the model (window length, or
            prompt + new tokens).
        config: transformers config or ``config.json`` dict.
        what: how the caller names the length (e.g. ``"--window-len 1000"``).

    Raises:
        OperandError: ``n_tokens`` > ``max_position_embeddings`` (one line
            naming both numbers). No check if the config has no such field.
    """
    ctx = context_length(config)
    if ctx is not None and int(n_tokens) > ctx:
        raise OperandError(
            f"{what}: {int(n_tokens)} tokens exceeds the model's context of {ctx} "
            f"tokens (max_position_embeddings in config.json)"
        )


@torch.no_grad()
def teacher_forced(model: nn.Module, windows: torch.Tensor, batch_size: int = 8) -> TeacherForced:
    """Teacher-forced replay of ``windows`` through ``model``.

    Args:
        model: ``Qwen3ForCausalLM`` (bf16 or a :func:`build_w8a8_model` copy).
        windows: int64 ``[B, T]`` token ids, T >= 2.
        batch_size: windows per forward pass (results do not depend on it
            for row-independent kernels; the bf16 lm_head matmul is the same
            shape per row block).

    Returns:
        :class:`TeacherForced`.

    Raises:
        OperandError: windows not int [B, T], ids out of vocabulary, or T
            longer than the model's context (``max_position_embeddings``).
    """
    windows = check_windows(windows, model.config.vocab_size)
    check_context(windows.shape[1], model.config, "window length")
    am, mg, t1, nl = [], [], [], []
    for i in range(0, windows.shape[0], batch_size):
        ids = windows[i : i + batch_size]
        logits = model(input_ids=ids, use_cache=False).logits.float()  # exact upcast
        top2 = logits.topk(2, dim=-1).values
        am.append(argmax_smallest(logits))
        mg.append(top2[..., 0] - top2[..., 1])
        t1.append(top2[..., 0])
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        nl.append(-logp.gather(-1, ids[:, 1:, None])[..., 0])
    return TeacherForced(torch.cat(am), torch.cat(mg), torch.cat(t1), torch.cat(nl))


def perplexity(model: nn.Module, windows: torch.Tensor, batch_size: int = 8) -> float:
    """Perplexity ``exp(mean_t -log p(x_{t+1} | x_<=t))`` over all windows.

    Every window position but the first is predicted (B * (T-1) targets),
    the definition HF's causal-LM loss uses (Jelinek et al. 1977; Jurafsky &
    Martin, SLP3 ch. 3.2). Windows are independent (no carried context).

    Args:
        model: bf16 or W8A8 ``Qwen3ForCausalLM``.
        windows: int64 ``[B, T]``.
        batch_size: windows per forward.

    Returns:
        perplexity (float, unitless).
    """
    return teacher_forced(model, windows, batch_size).perplexity


@torch.no_grad()
def greedy_generate(
    model: nn.Module,
    prompt_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int = 64,
    eos_token_id: Optional[int | Iterable[int]] = None,
    on_step: Optional[Callable[[int, torch.Tensor], None]] = None,
) -> list[int]:
    """Greedy decoding (argmax, ties -> smallest token id) with a KV cache.

    The prompt is one prefill pass (M = prompt length per linear); each new
    token is one decode step (M = 1), reusing the bf16 KV cache.

    Args:
        model: bf16 or W8A8 ``Qwen3ForCausalLM``.
        prompt_ids: 1-D token ids (list or int64 tensor), non-empty.
        max_new_tokens: tokens to generate (>= 0).
        eos_token_id: stop after emitting this id (or any of these ids).
        on_step: optional ``(step, logits)`` callback, called once per new
            token with the step index (0 = the token after the prompt) and
            that step's float32 logits ``[V]`` (exact upcast of the model's
            output) before the argmax is taken (e.g. to record the top-2
            margin at every step).

    Returns:
        the generated token ids (without the prompt).

    Raises:
        OperandError: empty prompt, ids out of vocabulary, negative length,
            prompt + ``max_new_tokens`` longer than the model's context.
    """
    ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(1, -1)
    if ids.numel() == 0:
        raise OperandError("prompt is empty (0 tokens)")
    if max_new_tokens < 0:
        raise OperandError(f"max_new_tokens={max_new_tokens} < 0")
    if int(ids.min()) < 0 or int(ids.max()) >= model.config.vocab_size:
        raise OperandError(f"prompt holds token ids outside [0, {model.config.vocab_size})")
    check_context(
        ids.shape[1] + max_new_tokens,
        model.config,
        f"prompt ({ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens})",
    )
    stop = (
        set()
        if eos_token_id is None
        else ({int(eos_token_id)} if isinstance(eos_token_id, int) else {int(e) for e in eos_token_id})
    )
    out: list[int] = []
    cache = None
    step_in = ids
    # transformers >= 5 names the KV cache ``cache``; 4.x ``past_key_values``
    import inspect

    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    for _ in range(max_new_tokens):
        res = model(input_ids=step_in, use_cache=True, **{cache_kw: cache})
        cache = getattr(res, cache_kw)
        logits = res.logits[0, -1].float()
        if on_step is not None:
            on_step(len(out), logits)
        nxt = int(argmax_smallest(logits))
        out.append(nxt)
        if nxt in stop:
            break
        step_in = torch.tensor([[nxt]], dtype=torch.long)
    return out
