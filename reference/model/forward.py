"""W8A8 forward of a Hugging Face Qwen3 causal LM through a plain ``scaled_mm``.

Every decoder-block linear (q, k, v, o, gate, up, down) becomes a W8A8 linear, the scheme vLLM serves for
compressed-tensors W8A8 checkpoints::

    x (bf16 [..., K]) --quantize_activation_per_token--> a int8 [M, K], s_a fp32 [M]
    y = scaled_mm(a, W_q int8 [N, K], s_a, s_w fp32 [N], out_dtype=x.dtype, bias) -> bf16 [M, N]

Everything else, ``lm_head`` included (as in llm-compressor's recipes), runs in bf16. ``scaled_mm`` is any callable
``(a, b, scale_a, scale_b, out_dtype, bias) -> Tensor[M, N]``; callers adapt kernels to it (this module never imports
``conformance``)."""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

import torch
from torch import nn

from reference.accumulate import FP32_EXACT_INT, exact_int_mm  # 2**24 bound, exact acc
from reference.epilogue import reference_scaled_mm
from reference.errors import CheckpointError, ContractError, OperandError, first_line
from reference.model import checkpoint
from reference.model.checkpoint import BLOCK_LINEARS
from reference.model.pow2 import requantize_pow2
from reference.quantize import quantize_activation_per_token, quantize_weight_per_channel

ScaledMM = Callable[..., torch.Tensor]


def model_class() -> type:
    """transformers' ``Qwen3ForCausalLM`` (imported here: its import tree costs seconds, paid on first use)."""
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM


def load_model(model_dir, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """A Hugging Face ``Qwen3ForCausalLM`` in ``dtype``, eval mode, on CPU; CheckpointError (never transformers' random
    initialization) for no config.json, not Qwen3, a missing or misshapen tensor, or weights that fail to load."""
    Qwen3ForCausalLM = model_class()
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
    checkpoint.load_qwen3_state(d)  # validation only (module attribute: a test bypasses it)
    with quiet_transformers():
        try:
            model, info = Qwen3ForCausalLM.from_pretrained(str(d), dtype=dtype, output_loading_info=True)
        except Exception as e:  # noqa: BLE001 -- transformers raises many types; one line instead of a deep traceback
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


@contextlib.contextmanager
def quiet_transformers():
    """transformers logging at ERROR and no progress bar, restored on exit."""
    from transformers.utils import logging as hf_logging

    level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()


def linear_names(num_layers: int) -> list[str]:
    """The ``7 * num_layers`` W8A8 linear names ``model.layers.{i}.{proj}`` in forward order."""
    return [f"model.layers.{i}.{p}" for i in range(num_layers) for p in BLOCK_LINEARS]


@dataclass
class QuantWeight:
    """One linear's W8A8 weight: ``q`` int8 ``[N, K]``, ``scale`` float32 ``[N]`` (``W ~= q * scale``), optional
    ``bias`` ``[N]`` in the model dtype."""

    q: torch.Tensor
    scale: torch.Tensor
    bias: Optional[torch.Tensor] = None


def as_quant_weight(
    q: torch.Tensor, scale: torch.Tensor, bias: Optional[torch.Tensor] = None, name: str = ""
) -> QuantWeight:
    """A :class:`QuantWeight` from int8 ``q`` ``[N, K]`` and a float ``scale`` ``[N]`` or ``[N, 1]`` (widened to
    float32, as vLLM stores it); OperandError naming layer ``name``."""
    if q.dtype != torch.int8 or q.dim() != 2:
        raise OperandError(f"{name}: weight must be int8 [N,K], got {q.dtype} {tuple(q.shape)}")
    n = q.shape[0]
    if not scale.is_floating_point() or scale.numel() != n or scale.dim() > 2 or scale.shape[1:] not in ((), (1,)):
        raise OperandError(
            f"{name}: weight scale must be float [N] or [N,1] with N={n}, got {scale.dtype} {tuple(scale.shape)}"
        )
    return QuantWeight(q.contiguous(), scale.reshape(n).to(torch.float32).contiguous(), bias)


def quantize_weights(model: nn.Module, quantizer: Optional[Callable] = None) -> dict[str, QuantWeight]:
    """``{layer name: QuantWeight}`` of every decoder linear, quantized from the parent weights by ``quantizer``
    (``w [N, K] -> (q int8, scale [N, 1] or [N])``; default :func:`reference.quantize.quantize_weight_per_channel`,
    llm-compressor's own scales)."""
    quantizer = quantizer or quantize_weight_per_channel
    out, mods = {}, dict(model.named_modules())
    for name in linear_names(model.config.num_hidden_layers):
        lin = mods[name]
        q, s = quantizer(lin.weight.detach())
        out[name] = as_quant_weight(q, s, None if lin.bias is None else lin.bias.detach(), name)
    return out


ENGINE_SCALE_MODES = ("own", "pow2-nearest", "pow2-ceiling")


def weights_for_scale_mode(model: nn.Module, scale_mode: str = "own") -> dict[str, QuantWeight]:
    """W8A8 weights of ``model`` in ``scale_mode`` from the parent weights: ``own`` (as the committed checkpoint) or
    ``pow2-nearest`` / ``pow2-ceiling`` (:func:`requantize_pow2`). ContractError: unknown mode."""
    if scale_mode == "own":
        return quantize_weights(model)
    if scale_mode in ("pow2-nearest", "pow2-ceiling"):
        rule = scale_mode.split("-", 1)[1]
        return quantize_weights(model, lambda w: requantize_pow2(w, rule=rule))
    raise ContractError(f"scale_mode={scale_mode!r} is not one of {ENGINE_SCALE_MODES}")


def weights_from_tensors(tensors: Mapping[str, torch.Tensor], num_layers: int) -> dict[str, QuantWeight]:
    """The weight map of a compressed-tensors state dict (``<layer>.weight`` int8 [N, K], ``.weight_scale`` float [N, 1],
    optional ``.bias``). CheckpointError: a weight or scale missing; OperandError: wrong dtype / shape."""
    out = {}
    for name in linear_names(num_layers):
        w, s = tensors.get(f"{name}.weight"), tensors.get(f"{name}.weight_scale")
        if w is None or s is None:
            missing = f"{name}.weight" if w is None else f"{name}.weight_scale"
            raise CheckpointError(f"W8A8 tensors: missing {missing}")
        out[name] = as_quant_weight(w, s, tensors.get(f"{name}.bias"), name)
    return out


@dataclass
class AccStats:
    """Per linear: ``max_abs_acc`` (largest exact |A_q @ W_q^T| over every call) and ``max_k`` (K)."""

    max_abs_acc: dict = field(default_factory=dict)
    max_k: dict = field(default_factory=dict)

    def layers_at_or_above(self, bound: int = FP32_EXACT_INT) -> list[str]:
        """Layers whose observed max |acc| >= ``bound`` (default 2^24)."""
        return [n for n, v in self.max_abs_acc.items() if v >= bound]


class W8A8Linear(nn.Module):
    """Drop-in for ``nn.Linear``: ``x`` float ``[..., K]`` -> per-token int8 -> ``scaled_mm``
    -> ``[..., N]`` in ``x.dtype``; rows are independent if ``scaled_mm``'s are."""

    def __init__(self, name: str, weight: QuantWeight, scaled_mm: ScaledMM, stats: Optional[AccStats] = None):
        super().__init__()
        self.name, self.qweight, self.scaled_mm, self.stats = name, weight, scaled_mm, stats
        self.out_features, self.in_features = weight.q.shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        a, s_a = quantize_activation_per_token(x.reshape(-1, x.shape[-1]).contiguous())
        # An all-zero row has scale 0, which scaled_mm rejects; any scale gives the same zero row.
        s_a = torch.where(s_a == 0, torch.ones_like(s_a), s_a)
        w = self.qweight
        y = self.scaled_mm(a, w.q, s_a, w.scale, x.dtype, w.bias)
        if self.stats is not None:
            m = int(exact_int_mm(a, w.q).abs().max())
            self.stats.max_abs_acc[self.name] = max(self.stats.max_abs_acc.get(self.name, 0), m)
            self.stats.max_k[self.name] = self.in_features
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:  # noqa: D102
        return f"{self.name}: K={self.in_features}, N={self.out_features}, W8A8"


def build_w8a8_model(
    model: nn.Module,
    weights: Mapping[str, QuantWeight],
    scaled_mm: ScaledMM | Mapping[str, ScaledMM],
    track_acc: bool = False,
) -> tuple[nn.Module, Optional[AccStats]]:
    """``(copy of model with W8A8 decoder linears, AccStats if track_acc else None)``, through ``scaled_mm`` (one
    callable or ``{layer: callable}``); ``weights`` covers :func:`linear_names`. CheckpointError: a layer missing;
    OperandError: a weight shape differs from its linear."""
    stats = AccStats() if track_acc else None
    names = linear_names(model.config.num_hidden_layers)
    missing = [n for n in names if n not in weights]
    if missing:
        raise CheckpointError(f"W8A8 weights: missing layer {missing[0]} ({len(missing)} missing)")
    mods = dict(model.named_modules())
    w8 = copy.deepcopy(model, {id(mods[n].weight): None for n in names})  # not the bf16 weights about to be replaced
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
    """The exact reference ``scaled_mm`` callable of an ``EpilogueContract``
    (:func:`reference.epilogue.reference_scaled_mm`); the contract is its ``.contract``."""

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return reference_scaled_mm(a, b, scale_a, scale_b, contract, bias=bias, out_dtype=out_dtype)

    scaled_mm.contract = contract
    return scaled_mm


@dataclass
class TeacherForced:
    """Teacher-forced outputs after reading ``windows[b, :t+1]``: ``argmax`` int64 ``[B, T]`` (ties
    -> smallest id), ``margin`` (top-1 minus top-2 logit) and ``top1`` float32 ``[B, T]``, ``nll``
    float32 ``[B, T-1]`` = ``-log softmax(logits[t])[windows[t+1]]``, logits upcast exactly."""

    argmax: torch.Tensor
    margin: torch.Tensor
    top1: torch.Tensor
    nll: torch.Tensor

    @property
    def perplexity(self) -> float:
        """exp(mean NLL) over every predicted position (mean taken in float64)."""
        return math.exp(self.nll.double().mean().item())


def argmax_smallest(logits: torch.Tensor) -> torch.Tensor:
    """int64 argmax over the last dim of ``[..., V]``, ties to the smallest index (torch's is only documented on CPU)."""
    mx, v = logits.max(dim=-1, keepdim=True).values, logits.shape[-1]
    idx = torch.arange(v, device=logits.device).expand_as(logits)
    return torch.where(logits == mx, idx, torch.full_like(idx, v)).min(dim=-1).values


def check_windows(windows: torch.Tensor, vocab: int) -> torch.Tensor:
    """``windows`` as int64 after checking int64/int32 ``[B, T]``, B >= 1, T >= 2, ids in ``[0, vocab)``; OperandError."""
    if not isinstance(windows, torch.Tensor) or windows.dim() != 2 or windows.dtype not in (torch.int64, torch.int32):
        raise OperandError(
            f"windows must be an int64 [B, T] tensor, got {getattr(windows, 'dtype', type(windows).__name__)} "
            f"{tuple(getattr(windows, 'shape', ()))}"
        )
    if windows.shape[1] < 2 or windows.shape[0] < 1:
        raise OperandError(f"windows must have B >= 1 and T >= 2, got {tuple(windows.shape)}")
    if int(windows.min()) < 0 or int(windows.max()) >= vocab:
        raise OperandError(f"windows hold token ids outside [0, {vocab})")
    return windows.long()


def context_length(config) -> Optional[int]:
    """``max_position_embeddings`` of a transformers config or ``config.json`` dict (None if absent)."""
    key = "max_position_embeddings"
    v = config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)
    return int(v) if isinstance(v, int) and v > 0 else None


def check_context(n_tokens: int, config, what: str = "window") -> None:
    """OperandError (naming ``what`` and both numbers) if ``n_tokens`` exceeds the model's ``max_position_embeddings``:
    beyond it a run measures extrapolation, not the kernel. No check if the config has no such field."""
    ctx = context_length(config)
    if ctx is not None and int(n_tokens) > ctx:
        raise OperandError(
            f"{what}: {int(n_tokens)} tokens exceeds the model's context of {ctx} "
            f"tokens (max_position_embeddings in config.json)"
        )


@torch.no_grad()
def teacher_forced(model: nn.Module, windows: torch.Tensor, batch_size: int = 8) -> TeacherForced:
    """:class:`TeacherForced` of int64 ``windows`` ``[B, T]`` through ``model`` (bf16 or :func:`build_w8a8_model`),
    ``batch_size`` windows per forward. OperandError: see :func:`check_windows`, or T beyond the model's context."""
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
    """``exp(mean -log p(x_{t+1} | x_<=t))`` over the B * (T-1) targets of independent windows ``[B, T]`` (HF's
    causal-LM loss; Jurafsky & Martin, SLP3 ch. 3.2)."""
    return teacher_forced(model, windows, batch_size).perplexity


@torch.no_grad()
def greedy_generate(
    model: nn.Module,
    prompt_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int = 64,
    eos_token_id: Optional[int | Iterable[int]] = None,
    on_step: Optional[Callable[[int, torch.Tensor], None]] = None,
) -> list[int]:
    """The token ids greedily generated after ``prompt_ids`` (argmax, ties -> smallest id): one prefill pass, then one
    decode step (M = 1) per token with the KV cache, stopping after any ``eos_token_id``.
    ``on_step(step, float32 logits [V])`` runs before each argmax. OperandError: empty prompt, ids out of vocabulary,
    negative length, or prompt + ``max_new_tokens`` beyond the model's context."""
    ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(1, -1)
    if ids.numel() == 0:
        raise OperandError("prompt is empty (0 tokens)")
    if max_new_tokens < 0:
        raise OperandError(f"max_new_tokens={max_new_tokens} < 0")
    if int(ids.min()) < 0 or int(ids.max()) >= model.config.vocab_size:
        raise OperandError(f"prompt holds token ids outside [0, {model.config.vocab_size})")
    what = f"prompt ({ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens})"
    check_context(ids.shape[1] + max_new_tokens, model.config, what)
    eos = () if eos_token_id is None else (eos_token_id,) if isinstance(eos_token_id, int) else eos_token_id
    stop = {int(e) for e in eos}
    out: list[int] = []
    cache, step_in = None, ids
    # transformers >= 5 names the KV cache ``cache``; 4.x ``past_key_values``
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
