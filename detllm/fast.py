"""The engine's GPU decode path: fused integer kernels, static KV cache, one CUDA graph per decode step.

``FastDecoder`` runs the integer forward of ``detllm.engine._forward`` (same artifact, rules and bits)
with the per-token ops fused into the Triton kernels of ``detllm.kernels`` (about nine launches per
block). A decode step reads the fed-back token and lengths from device memory and writes the logits,
the greedy next token (``ops.argmax_int``) and lengths + 1 back: no host sync and no data-dependent
Python control flow, so on CUDA it is captured once in a ``torch.cuda.CUDAGraph`` and replayed per
token; on the CPU the same code runs eagerly under Triton's interpreter. Prefill runs the same kernels
eagerly. The matmuls are the fused GEMM of ``detllm.kernels.linear``, not a registry kernel's ``int_mm``:
this path is the fast ground truth; the kernel-under-test path stays ``detllm.engine``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from detllm import engine as E
from detllm import generate as G
from detllm import ops
from detllm.kernels import attention as KA
from detllm.kernels import linear as KL
from detllm.kernels import norm_quant as KN
from detllm.kernels import qk_rope as KQ
from detllm.kernels import quant_rows as KR
from reference.errors import OperandError


@dataclass
class FastDecoder:
    """Static-state fused decoder for ``batch`` sequences of up to ``capacity`` positions.

    Device state: ``cache`` (``engine.KVCache``), ``lengths`` int64 [B], ``tok`` int64 [B] (the token fed to
    the next step), ``logits`` int32 [B, vocab] (the last step's); ``host_lengths`` mirrors ``lengths``.
    """

    engine: E.Engine
    batch: int
    capacity: int
    use_graph: bool = True
    cache: Optional[E.KVCache] = None
    lengths: Optional[torch.Tensor] = None
    tok: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None
    host_lengths: list = field(default_factory=list)
    graph: object = None
    graph_steps: int = 0
    eager_steps: int = 0

    def __post_init__(self):
        eng = self.engine
        d = eng.dims
        if d["head_dim"] & (d["head_dim"] - 1):
            raise OperandError(f"fast path: head_dim {d['head_dim']} must be a power of two")
        self.cache = E.new_cache(eng, self.batch, self.capacity)
        dev = eng.device
        self.lengths = torch.zeros(self.batch, dtype=torch.int64, device=dev)
        self.tok = torch.zeros(self.batch, dtype=torch.int64, device=dev)
        self.logits = torch.zeros(self.batch, d["vocab"], dtype=torch.int32, device=dev)
        self.host_lengths = [0] * self.batch
        self._seq = torch.arange(self.batch, dtype=torch.int64, device=dev)
        self._ones = torch.ones(self.batch, dtype=torch.int32, device=dev)
        t = eng.t
        self._gqk = [
            torch.cat([t[f"layers.{i}.q_norm.g"], t[f"layers.{i}.k_norm.g"]], 0).contiguous()
            for i in range(d["layers"])
        ]
        self._w = {k: v.contiguous() for k, v in t.items()}

    def _forward_rows(
        self, ids: torch.Tensor, pos: torch.Tensor, seq: torch.Tensor, valid: torch.Tensor, nkeys: torch.Tensor
    ) -> torch.Tensor:
        """Fused forward of R rows (ids, pos, seq, nkeys int64 [R], valid int32 [R]) -> int32 logits [R, vocab]."""
        eng, w = self.engine, self._w
        d, u = eng.dims, eng.units
        nh, nkv = d["heads"], d["kv_heads"]
        x = w["embed"][ids]  # int64 [R, H]
        for i, lc in enumerate(eng.artifact.config["layers"]):
            p = f"layers.{i}."
            kc, vc = self.cache.k[i], self.cache.v[i]
            q8, tm, tk = KN.norm_quant(x, w[p + "attn_norm.g"], u["resid_eps"])
            norm_args = [lc[k] for k in ("q_norm_eps", "q_norm_shift", "k_norm_eps", "k_norm_shift")]
            qq, qtm, qtk = KQ.qk_rope_cache(
                self._lin(p + "qkv", q8, tm, tk), self._gqk[i], w["rope.cos"], w["rope.sin"], pos, seq, valid,
                w[p + "k_cache.m"], w[p + "k_cache.k"], kc, vc, nh, nkv, *norm_args, u["qk_exp"], u["rope_exp"],
            )  # fmt: skip
            o = KA.attention(qq, qtm, qtk, w[p + "score.m"], w[p + "score.k"], kc, vc, seq, nkeys, u["score_exp"])
            self._lin(p + "o", *KR.quant_rows(o), KL.MODE_RESIDUAL, out=x)
            m8, tm, tk = KN.norm_quant(x, w[p + "mlp_norm.g"], u["resid_eps"])
            h = self._lin(p + "gate_up", m8, tm, tk, KL.MODE_SWIGLU, gate_exp=lc["gate_exp"], up_exp=lc["up_exp"])
            self._lin(p + "down", *KR.quant_rows(h), KL.MODE_RESIDUAL, out=x)
        f8, tm, tk = KN.norm_quant(x, w["final_norm.g"], u["resid_eps"])
        return self._lin("lm_head", f8, tm, tk, KL.MODE_LOGITS)

    def _lin(self, name, a, tm, tk, *mode, **kw):
        w = self._w
        return KL.linear(a, w[name + ".w"], tm, tk, w[name + ".m"], w[name + ".k"], *mode, **kw)

    def prefill(self, tokens: torch.Tensor, n_new: list) -> torch.Tensor:
        """One prefill chunk: row b's first n_new[b] ids of ``tokens`` [B, T] at positions lengths[b]... -> int32
        logits [B, T, vocab] (padding rows zero). OperandError for bad ids or context overflow.
        """
        B, T = tokens.shape
        if B != self.batch or len(n_new) != B:
            raise OperandError(f"prefill: batch {B} / n_new {len(n_new)} != decoder batch {self.batch}")
        rows = [(b, t) for b in range(B) for t in range(n_new[b])]
        for b in range(B):
            if self.host_lengths[b] + n_new[b] > self.capacity:
                raise OperandError(
                    f"sequence {b}: {self.host_lengths[b] + n_new[b]} tokens exceed the context of {self.capacity}"
                )
        V = self.engine.dims["vocab"]
        out = torch.zeros(B, T, V, dtype=torch.int32, device=self.engine.device)
        if not rows:
            return out
        tok = tokens.cpu()
        ids = torch.tensor([int(tok[b, t]) for b, t in rows], dtype=torch.int64)
        E.check_tokens(self.engine, ids)
        pos = torch.tensor([self.host_lengths[b] + t for b, t in rows], dtype=torch.int64)
        seq = torch.tensor([b for b, _ in rows], dtype=torch.int64)
        dev = self.engine.device
        ones = torch.ones(len(rows), dtype=torch.int32, device=dev)
        lg = self._forward_rows(ids.to(dev), pos.to(dev), seq.to(dev), ones, (pos + 1).to(dev))
        bi = seq.to(dev)
        ti = torch.tensor([t for _, t in rows], dtype=torch.int64, device=dev)
        out[bi, ti] = lg
        for b in range(B):
            self.host_lengths[b] += n_new[b]
        self.lengths.copy_(torch.tensor(self.host_lengths, dtype=torch.int64))
        return out

    def _decode_body(self) -> None:
        lg = self._forward_rows(self.tok, self.lengths, self._seq, self._ones, self.lengths + 1)
        self.logits.copy_(lg)
        self.tok.copy_(ops.argmax_int(lg))
        self.lengths.add_(1)

    def step(self) -> None:
        """Feed ``tok`` at position ``lengths``; leaves the logits in ``logits`` and the greedy next token in ``tok``.

        On CUDA the first step runs eagerly (compiles), the second captures the graph, later ones replay it.
        Raises OperandError when a sequence would exceed the capacity.
        """
        if max(self.host_lengths) + 1 > self.capacity:
            raise OperandError(f"decode: context of {self.capacity} tokens exhausted")
        cuda = self.engine.device.type == "cuda"
        if cuda and self.use_graph and self.eager_steps >= 1:
            if self.graph is None:
                torch.cuda.synchronize()
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph):
                    self._decode_body()
            self.graph.replay()
            self.graph_steps += 1
        else:
            self._decode_body()
            self.eager_steps += 1
        for b in range(self.batch):
            self.host_lengths[b] += 1


def fast_generate(
    engine: E.Engine,
    prompts,
    max_new_tokens: int = 16,
    schedule="full",
    keep_logits: bool = False,
    use_graph: bool = True,
    timings: Optional[dict] = None,
) -> G.GenerationResult:
    """``detllm.generate.generate`` through ``FastDecoder``: same hashes, same tokens.

    Decode logits stay on the device until the end, so timing covers device work only. ``timings`` (a
    dict) gets prefill_s / decode_s (synchronized wall seconds), decode_steps (timed steps: on CUDA the
    eager and capturing steps are excluded), prefill_tokens and graph_steps.
    """
    d = engine.dims
    ps = G._check_prompts(prompts, d["vocab"], engine.max_context, max_new_tokens)
    B = len(ps)
    cap = max(len(p) + max(0, max_new_tokens - 1) for p in ps)
    dec = FastDecoder(engine, B, max(1, cap), use_graph=use_graph)
    dev = engine.device
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    chunks = [G.prefill_chunks(len(p), schedule) for p in ps]
    lchain, tchain, kept = G._chains(B, keep_logits)
    last = [None] * B
    sync()
    t0 = time.perf_counter()
    outs = []
    for c in range(max(len(ch) for ch in chunks)):
        sizes, toks = G.chunk_tokens(ps, chunks, c, dec.host_lengths)
        outs.append((sizes, dec.prefill(toks, sizes)))
    sync()
    t1 = time.perf_counter()
    for sizes, lg in outs:
        G._absorb_chunk(lg.cpu(), sizes, lchain, kept, last)
    first = ops.argmax_int(torch.stack(last))
    steps = max(0, max_new_tokens - 1)
    hist = torch.empty(steps, B, d["vocab"], dtype=torch.int32, device=dev)
    thist = torch.empty(steps, B, dtype=torch.int64, device=dev)
    dec.tok.copy_(first.to(dev))
    # the timed window starts after the eager (compiling) and the capturing CUDA step
    warm = min(steps, 2 if (dev.type == "cuda" and use_graph) else 0)
    t2 = None
    for s in range(steps):
        if s == warm:
            sync()
            t2 = time.perf_counter()
        dec.step()
        hist[s].copy_(dec.logits)
        thist[s].copy_(dec.tok)
    sync()
    t3 = time.perf_counter()
    t2 = t3 if t2 is None else t2
    hist, thist = hist.cpu(), thist.cpu()
    generated = [[int(first[b])] + [int(thist[s, b]) for s in range(steps)] for b in range(B)]
    generated = [g[:max_new_tokens] for g in generated]
    for b in range(B):
        for s in range(steps):
            lchain[b].update_rows(hist[s, b : b + 1], "<i4")
        if keep_logits:
            kept[b].append(hist[:, b])
        for tid in generated[b]:
            tchain[b].update_id(tid)
    if timings is not None:
        timings.update(prefill_s=t1 - t0, decode_s=t3 - t2, decode_steps=steps - warm)
        timings.update(prefill_tokens=sum(len(p) for p in ps), graph_steps=dec.graph_steps)
    info = dict(kernel="fused-triton", artifact=engine.digest[:12], schedule=str(schedule), device=str(dev))
    info["cuda_graph"] = dec.graph is not None
    return G._result(ps, generated, lchain, tchain, kept, forward_calls=len(outs) + steps, info=info)
