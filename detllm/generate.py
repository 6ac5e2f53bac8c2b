"""Greedy decoding with the integer engine, and the run's hashes.

Logits hash per sequence: h_0 = sha256(b"detllm-logits-v1"), h_{p+1} = sha256(h_p || int32 LE bytes of
logits[p]) for every computed position in order, so it does not depend on the prefill split. Token
hash: t_0 = sha256(b"detllm-tokens-v1"), t_{i+1} = sha256(t_i || int32 LE id). Shown as 12 hex digits.
Greedy ties go to the smallest id. ``float_generate`` hashes a transformers model's float32 logits the
same way, for contrast (those move with batch, split and backend).
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import numpy as np
import torch

from detllm import engine as E
from detllm import ops
from reference.errors import Int8confError, OperandError
from reference.model.forward import quiet_transformers

LOGITS_TAG = b"detllm-logits-v1"
TOKENS_TAG = b"detllm-tokens-v1"


class HashChain:
    """Chained SHA-256: state = sha256(state || chunk) per update."""

    def __init__(self, tag: bytes):
        self.state = hashlib.sha256(tag).digest()
        self.count = 0

    def update(self, chunk: bytes) -> None:
        self.state = hashlib.sha256(self.state + chunk).digest()
        self.count += 1

    def update_rows(self, rows: torch.Tensor, dtype: str) -> None:
        """One update per row of a 2-D tensor, bytes as numpy ``dtype`` (e.g. '<i4')."""
        a = np.ascontiguousarray(rows.detach().cpu().numpy().astype(dtype, copy=False))
        for r in a:
            self.update(r.tobytes())

    def update_id(self, tid: int) -> None:
        self.update(np.int32(tid).astype("<i4").tobytes())

    def hexdigest(self) -> str:
        return self.state.hex()


def _chains(B: int, keep_logits: bool):
    """Per-sequence logits chains, token chains and kept-logits lists (None unless ``keep_logits``)."""
    kept = [[] for _ in range(B)] if keep_logits else None
    return [HashChain(LOGITS_TAG) for _ in range(B)], [HashChain(TOKENS_TAG) for _ in range(B)], kept


def _absorb_chunk(logits, sizes, lchain, kept, last) -> None:
    """Hash (and keep) the valid rows of one prefill chunk's int32 logits [B, T, V]; last[b] = row b's last."""
    for b, n in enumerate(sizes):
        if n:
            rows = logits[b, :n]
            lchain[b].update_rows(rows, "<i4")
            if kept is not None:
                kept[b].append(rows.cpu())
            last[b] = rows[-1]


def _result(ps, generated, lchain, tchain, kept, **kw) -> "GenerationResult":
    logits = [torch.cat(k, 0) for k in kept] if kept is not None else None
    hexes = [[h.hexdigest() for h in chains] for chains in (lchain, tchain)]
    return GenerationResult(ps, generated, *hexes, logits=logits, **kw)


@dataclass
class GenerationResult:
    """Output of ``generate`` / ``float_generate``: per sequence the prompt, generated ids, full-hex logits and
    token hashes, and the logits ([positions, vocab]) when ``keep_logits``.
    """

    prompts: list
    generated: list
    logits_hash: list
    token_hash: list
    logits: Optional[list] = None
    forward_calls: int = 0
    info: dict = field(default_factory=dict)

    def short(self, i: int = 0) -> tuple[str, str]:
        """(logits hash, token hash) of sequence i, 12 hex digits each."""
        return self.logits_hash[i][:12], self.token_hash[i][:12]


Schedule = Union[str, int, Sequence[int]]


def prefill_chunks(n: int, schedule: Schedule = "full") -> list[int]:
    """Chunk sizes splitting an n-token prompt: "full", "half" (ceil(n/2), rest), "token", an int c (chunks of c)
    or explicit sizes summing to n. OperandError for anything else.
    """
    if schedule == "full":
        out = [n]
    elif schedule == "half":
        a = (n + 1) // 2
        out = [a, n - a] if n - a else [a]
    elif schedule == "token":
        out = [1] * n
    elif isinstance(schedule, int) and not isinstance(schedule, bool) and schedule >= 1:
        out = [min(schedule, n - s) for s in range(0, n, schedule)]
    elif isinstance(schedule, (list, tuple)) and all(isinstance(c, int) and c >= 1 for c in schedule):
        out = list(schedule)
    else:
        raise OperandError(f"prefill schedule {schedule!r}: expected 'full', 'half', 'token', an int >= 1 or sizes")
    if sum(out) != n:
        raise OperandError(f"prefill schedule {schedule!r} covers {sum(out)} tokens, prompt has {n}")
    return out


def chunk_tokens(prompts: list, chunks: list, c: int, lengths) -> tuple[list[int], torch.Tensor]:
    """Prefill chunk ``c`` of every sequence: (sizes, B ints, 0 when a sequence has fewer chunks; int64
    [B, max(sizes)], each chunk left-aligned, zero padding). ``lengths``: tokens already cached per sequence.
    """
    sizes = [ch[c] if c < len(ch) else 0 for ch in chunks]
    toks = torch.zeros(len(prompts), max(sizes), dtype=torch.int64)
    for b, p in enumerate(prompts):
        s = lengths[b]
        toks[b, : sizes[b]] = torch.tensor(p[s : s + sizes[b]], dtype=torch.int64)
    return sizes, toks


def _check_prompts(prompts, vocab: int, context: int, max_new_tokens: int) -> list[list[int]]:
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise OperandError("prompts: expected a non-empty list of token-id lists")
    out = []
    for i, p in enumerate(prompts):
        ids = p.tolist() if isinstance(p, torch.Tensor) else list(p)
        if not ids:
            raise OperandError(f"prompt {i} is empty (need at least one token)")
        if any((not isinstance(t, int)) or isinstance(t, bool) for t in ids):
            raise OperandError(f"prompt {i}: token ids must be integers")
        lo, hi = min(ids), max(ids)
        if lo < 0 or hi >= vocab:
            raise OperandError(f"prompt {i}: token id out of range [0, {vocab}) (min {lo}, max {hi})")
        if len(ids) + max(0, max_new_tokens - 1) > context:
            raise OperandError(
                f"prompt {i}: {len(ids)} tokens + {max_new_tokens} new exceed the context of {context} tokens"
            )
        out.append(ids)
    if max_new_tokens < 0:
        raise OperandError(f"max_new_tokens={max_new_tokens} must be >= 0")
    return out


def generate(
    engine: E.Engine, prompts, max_new_tokens: int = 16, schedule: Schedule = "full", keep_logits: bool = False
) -> GenerationResult:
    """Greedy decoding of a batch of token-id lists (lengths may differ) -> GenerationResult.

    ``schedule`` splits each prompt's prefill (``prefill_chunks``); chunks run together across the batch.
    No early stop. Raises OperandError: empty prompt, id out of range, context exceeded (one line).
    """
    d = engine.dims
    ps = _check_prompts(prompts, d["vocab"], engine.max_context, max_new_tokens)
    B = len(ps)
    chunks = [prefill_chunks(len(p), schedule) for p in ps]
    cap = max(len(p) + max(0, max_new_tokens - 1) for p in ps)
    cache = E.new_cache(engine, B, cap)
    lchain, tchain, kept = _chains(B, keep_logits)
    last = [None] * B
    calls = 0
    for c in range(max(len(ch) for ch in chunks)):
        sizes, toks = chunk_tokens(ps, chunks, c, cache.length)
        logits = E.forward(engine, toks, sizes, cache)
        calls += 1
        _absorb_chunk(logits, sizes, lchain, kept, last)
    generated = [[] for _ in range(B)]
    for step in range(max_new_tokens):
        nxt = ops.argmax_int(torch.stack(last)).cpu()
        for b in range(B):
            generated[b].append(int(nxt[b]))
            tchain[b].update_id(int(nxt[b]))
        if step == max_new_tokens - 1:
            break
        logits = E.forward(engine, nxt.view(B, 1), [1] * B, cache)
        calls += 1
        for b in range(B):
            lchain[b].update_rows(logits[b, :1], "<i4")
            if keep_logits:
                kept[b].append(logits[b, :1].cpu())
            last[b] = logits[b, 0]
    info = dict(
        kernel=engine.kernel_name, artifact=engine.digest[:12], schedule=str(schedule), device=str(engine.device)
    )
    return _result(ps, generated, lchain, tchain, kept, forward_calls=calls, info=info)


def teacher_forced_logits(engine: E.Engine, windows: torch.Tensor, batch_size: int = 4) -> torch.Tensor:
    """int32 logits [n, L, vocab] of the engine on token windows [n, L] (one prefill each)."""
    outs = []
    for s in range(0, windows.shape[0], batch_size):
        w = windows[s : s + batch_size]
        cache = E.new_cache(engine, w.shape[0], w.shape[1])
        outs.append(E.forward(engine, w.to(torch.int64), [w.shape[1]] * w.shape[0], cache).cpu())
    return torch.cat(outs, 0)


def load_float_model(model_dir, dtype: torch.dtype = torch.bfloat16, device: str = "cpu"):
    """transformers causal LM in ``dtype`` on ``device``, eval mode; Int8confError (one line) when it cannot load."""
    import transformers

    try:
        with quiet_transformers():  # no third-party progress bar or notice in detllm's output
            m = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
    except (OSError, ValueError) as exc:
        raise Int8confError(f"{model_dir}: cannot load the float model ({exc.__class__.__name__})") from None
    return m.to(device).eval()


def cache_kwargs(model, cache) -> dict:
    """``{"cache": c}`` or ``{"past_key_values": c}``, whichever the installed transformers' forward accepts."""
    params = inspect.signature(type(model).forward).parameters
    return {"cache": cache} if "cache" in params else {"past_key_values": cache}


@torch.no_grad()
def left_pad(prompts, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and attention mask, both int64 [B, max length]."""
    B, T = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, T - len(p) :] = torch.tensor(p)
        mask[b, T - len(p) :] = 1
    return ids, mask


def float_generate(
    model, prompts, max_new_tokens: int = 16, schedule: Schedule = "full", keep_logits: bool = False, pad_id: int = 0
) -> GenerationResult:
    """The same greedy schedule through a float transformers model (left-padded, explicit positions, chunks of
    the longest prompt); hashes over float32 logits bytes.
    """
    from transformers import DynamicCache

    V = model.config.vocab_size
    ctx = int(getattr(model.config, "max_position_embeddings", 1 << 30))
    ps = _check_prompts(prompts, V, ctx, max_new_tokens)
    B = len(ps)
    dev = next(model.parameters()).device
    ids, mask = left_pad(ps, pad_id)
    chunks = prefill_chunks(ids.shape[1], schedule)  # the schedule applies to the padded prompt
    cache = DynamicCache()

    def fwd(ids, mask, pos):
        kw = cache_kwargs(model, cache)
        out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), use_cache=True, **kw)
        return out.logits.float().cpu()

    lchain, tchain, kept = _chains(B, keep_logits)
    s = 0
    last = None
    full_mask = mask
    for c in chunks:
        pos = (full_mask.cumsum(-1) - 1).clamp(min=0)[:, s : s + c]
        lg = fwd(ids[:, s : s + c], full_mask[:, : s + c], pos)
        for b in range(B):
            valid = mask[b, s : s + c].bool()
            lchain[b].update_rows(lg[b][valid], "<f4")
            if keep_logits:
                kept[b].append(lg[b][valid])
        last = lg[:, -1]
        s += c
    generated = [[] for _ in range(B)]
    cur_mask = full_mask
    for step in range(max_new_tokens):
        nxt = last.argmax(-1)
        for b in range(B):
            generated[b].append(int(nxt[b]))
            tchain[b].update_id(int(nxt[b]))
        if step == max_new_tokens - 1:
            break
        cur_mask = torch.cat([cur_mask, torch.ones(B, 1, dtype=torch.long)], 1)
        pos = cur_mask.sum(-1, keepdim=True) - 1
        lg = fwd(nxt.view(B, 1), cur_mask, pos)
        for b in range(B):
            lchain[b].update_rows(lg[b], "<f4")
            if keep_logits:
                kept[b].append(lg[b])
        last = lg[:, -1]
    info = {"model": "float", "dtype": str(next(model.parameters()).dtype), "schedule": str(schedule)}
    return _result(ps, generated, lchain, tchain, kept, info=info)
