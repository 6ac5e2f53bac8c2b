"""The integer-only Qwen3 forward with a KV cache (the CPU reference path and the kernel-under-test path).

Every op from token ids to int32 logits is integer arithmetic; the only hardware-dependent op is the
int8 x int8 -> int32 matmul, which goes through a kernel's accumulator-only entry ``KernelSpec.int_mm``
(default: ``reference.accumulate.exact_int_mm``). Integer addition is associative, so any correct kernel,
batch composition, prefill split or device gives the same bits. Per block: norm_quant -> qkv linear ->
QK-norm (``norm_fixed``) + RoPE -> int8 K/V written once to the cache -> scores -> ``ops.int_softmax``
-> ``ops.pv_matmul`` -> o linear + saturating residual add -> norm_quant -> gate_up -> ``ops.int_swiglu``
-> down + add; then final norm_quant -> lm_head -> int32 logits (units 2^-logit_exp). Units and rules:
``detllm.prepare``, ``detllm/README.md``. Methods: I-BERT, I-ViT, I-LLM, SmoothQuant (eq. 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence, Union

import torch

from conformance.kernels.loader import undeclared_callable
from conformance.kernels.registry import get_kernel
from detllm import guard as _guard
from detllm import intops, ops
from detllm.artifact import Artifact, load_artifact
from reference.accumulate import exact_int_mm
from reference.errors import Int8confError, KernelLoadError, OperandError, first_line

_NEG_INF = -(1 << 62)


def reference_int_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact reference accumulator: int8 a [M,K], b [N,K] -> int32 [M,N] (exact while K < 133,000)."""
    return exact_int_mm(a, b).to(torch.int32)


def resolve_int_mm(kernel=None) -> tuple[Callable, str]:
    """(int_mm callable, label) for None / "reference" / a KernelSpec / a registry name / a callable, or
    ``pkg.module:function`` naming an undeclared callable, taken as the int_mm itself (no epilogue declared).

    Raises KernelLoadError: unknown name, or a kernel without an ``int_mm`` entry.
    """
    if kernel is None or kernel in ("reference", "exact"):
        return reference_int_mm, "reference"
    if callable(kernel) and not hasattr(kernel, "int_mm"):
        return kernel, getattr(kernel, "__name__", "callable")
    if isinstance(kernel, str):
        plain = undeclared_callable(kernel)  # an int_mm needs no epilogue declaration: the engine uses no epilogue
        if plain is not None:
            return plain, kernel
        kernel = get_kernel(kernel)
    fn = getattr(kernel, "int_mm", None)
    if fn is None:
        raise KernelLoadError(f"kernel {getattr(kernel, 'name', kernel)!r} has no int_mm (accumulator-only) entry")
    return fn, str(getattr(kernel, "name", "kernel"))


_POW2: dict = {}


def div_round_pos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """round(a / b), ties away from zero, for int64 a and b > 0 (not checked): floor((2|a| + b) / 2b), sign of a.
    Precondition: 2|a| + b < 2^63.
    """
    aa = a.abs()
    q = torch.div(2 * aa + b, 2 * b, rounding_mode="floor")
    return torch.where(a < 0, -q, q)


def _bitlen(a: torch.Tensor) -> torch.Tensor:
    """Bit length of int64 0 <= a < 2^63 (0 for 0), as a count of powers of two <= a."""
    key = str(a.device)
    if key not in _POW2:
        _POW2[key] = torch.tensor([1 << k for k in range(63)], dtype=torch.int64, device=a.device)
    return (a.unsqueeze(-1) >= _POW2[key]).sum(-1)


def ratio_dyadic(num: torch.Tensor, den: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row dyadic (m, k), m 2^-k ~= num / den with m in [2^15, 2^17], one rounding; num == 0 gives (0, 0).

    num >= 0, den >= 1: int64 [R]; k = 16 - (bitlen(num) - bitlen(den)). Precondition: num 2^k, den 2^-k < 2^63.
    """
    pos = num > 0
    a = _bitlen(num)
    b = _bitlen(den)
    k = torch.where(pos, 16 - (a - b), torch.zeros_like(a))
    numer = intops.floor_shift(num, -k.clamp(min=0))
    denom = intops.floor_shift(den, -((-k).clamp(min=0)))
    return div_round_pos(numer, denom), k


def normalize17(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row v >= 0 as (m, k), m 2^-k, with m < 2^17 (round_shift; k <= 0)."""
    s = (_bitlen(v) - 17).clamp(min=0)
    return intops.round_shift(v, s), -s


def isqrt_newton(n: torch.Tensor) -> torch.Tensor:
    """Exact floor(sqrt(n)) for int64 0 <= n < 2^62: the function of ``intops.isqrt`` in fewer tensor ops.

    Integer Newton from x0 = 2^ceil(bitlen/2) >= sqrt(n) (I-BERT Algorithm 4): six steps
    x <- min(x, (x + n // x) >> 1) reach floor(sqrt(n)) or +1; a final compare fixes the +1.
    """
    b = _bitlen(n)
    x = torch.bitwise_left_shift(torch.ones_like(n), torch.div(b + 1, 2, rounding_mode="floor"))
    for _ in range(6):
        y = torch.bitwise_right_shift(x + torch.div(n, x, rounding_mode="floor"), 1)
        x = torch.minimum(x, y).clamp(min=1)
    return x - (x * x > n).to(torch.int64)


def _rms_core(x: torch.Tensor, eps_int: int):
    """(xs [..., H] with |xs| <= 2^15, r ~= sqrt(S/H) 2^P, P) for int64 x [..., H]; S = sum xs^2 + eps in xs units."""
    H = x.shape[-1]
    sh = (_bitlen(x.abs().amax(-1)) - 15).clamp(min=0)
    xs = intops.round_shift(x, sh[..., None])
    eps_t = intops.round_shift(torch.full_like(sh, int(eps_int)), 2 * sh)
    S = (xs * xs).sum(-1) + eps_t
    bound = H * (1 << 30) + int(eps_int)
    P = max(0, (62 - bound.bit_length()) // 2)
    r = isqrt_newton(torch.div(intops.floor_shift(S, -2 * P), H, rounding_mode="floor")).clamp(min=1)
    return xs, r, P


def norm_quant(x: torch.Tensor, g: torch.Tensor, eps_int: int):
    """RMSNorm fused with per-token int8: x int64 [R, H], g int [H] -> (q int8 [R, H] in [-127, 127], tm [R], tk [R]).

    Normalized value ~= q tm 2^-tk 2^-gs / 127 (``prepare`` folds 2^-gs / 127 into the next linear);
    eps_int = eps / u^2 for x in unit u.
    """
    xs, r, P = _rms_core(x, eps_int)
    z = xs * g.to(torch.int64)
    M = z.abs().amax(-1)
    q = div_round_pos(127 * z, M.clamp(min=1)[:, None]).to(torch.int8)
    tm, tk = ratio_dyadic(intops.floor_shift(M, -P), r)
    return q, tm, tk


def norm_fixed(x: torch.Tensor, g: torch.Tensor, gs: int, eps_int: int, out_exp: int) -> torch.Tensor:
    """RMSNorm to the fixed unit 2^-out_exp, one rounding: x int64 [..., D], g int broadcastable (gamma 2^gs)."""
    xs, r, P = _rms_core(x, eps_int)
    z = xs * g.to(torch.int64)
    e = out_exp - gs + P
    if e >= 0:
        return div_round_pos(intops.floor_shift(z, -e), r[..., None])
    return div_round_pos(z, intops.floor_shift(r, e)[..., None])


def quant_rows(v: torch.Tensor):
    """Per-row int8: (q = div_round(127 v, max|v|), tm, tk); row scale = tm 2^-tk / 127 in v's unit."""
    M = v.abs().amax(-1)
    q = div_round_pos(127 * v, M.clamp(min=1)[..., None]).to(torch.int8)
    tm, tk = normalize17(M)
    return q, tm, tk


def sat32(x: torch.Tensor) -> torch.Tensor:
    """Clamp int64 to the int32 range (dtype kept)."""
    return x.clamp(-(2**31), 2**31 - 1)


@dataclass
class KVCache:
    """int8 K/V cache, quantized once when written: k, v per layer int8 [B, kv_heads, capacity, head_dim];
    ``length``: tokens cached per sequence.
    """

    k: list
    v: list
    length: list
    capacity: int


@dataclass
class Engine:
    """A verified artifact bound to an int_mm kernel and a device.

    ``int_mm``: (a int8 [M,K], b int8 [N,K]) -> int32 [M,N]; ``t``: artifact tensors on ``device``
    (mantissas, shifts, multipliers and embed as int64); ``guard``: run each forward under the float
    guard; ``mm_calls``: int_mm calls so far.
    """

    artifact: Artifact
    int_mm: Callable
    kernel_name: str
    device: torch.device
    t: dict = field(default_factory=dict)
    guard: bool = True
    mm_calls: int = 0

    @property
    def dims(self) -> dict:
        return self.artifact.config["model"]

    @property
    def units(self) -> dict:
        return self.artifact.config["units"]

    @property
    def digest(self) -> str:
        return self.artifact.digest

    @property
    def max_context(self) -> int:
        return int(self.dims["max_position"])


def load_engine(artifact: Union[Artifact, str], kernel=None, device: str = "cpu", guard: bool = True) -> Engine:
    """Engine from an Artifact or artifact dir and a kernel (None: exact reference; name, KernelSpec or callable).

    Raises CheckpointError, KernelLoadError, or OperandError (bad or absent device): one line.
    """
    art = artifact if isinstance(artifact, Artifact) else load_artifact(artifact)
    fn, name = resolve_int_mm(kernel)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise OperandError(f"device {device!r} is not a torch device") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise OperandError(f"device {device!r} requested but CUDA is not available on this machine")
    wide = lambda k: k.endswith((".m", ".k", ".g")) or k == "embed"
    t = {k: v.to(dev).to(torch.int64) if wide(k) else v.to(dev) for k, v in art.tensors.items()}
    return Engine(artifact=art, int_mm=fn, kernel_name=name, device=dev, t=t, guard=guard)


def new_cache(engine: Engine, batch: int, capacity: int) -> KVCache:
    """Empty KV cache for ``batch`` sequences of ``capacity`` positions; OperandError beyond the model's context."""
    d = engine.dims
    if capacity > engine.max_context:
        raise OperandError(f"context of {capacity} tokens exceeds the model's maximum of {engine.max_context}")
    shape = (batch, d["kv_heads"], max(1, capacity), d["head_dim"])
    zeros = lambda: [torch.zeros(shape, dtype=torch.int8, device=engine.device) for _ in range(d["layers"])]
    return KVCache(k=zeros(), v=zeros(), length=[0] * batch, capacity=max(1, capacity))


def _mm32(engine: Engine, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Kernel int_mm with its output checked to be int32 [M,N]; OperandError (one line, cause chained) when the
    kernel raises or returns anything else.
    """
    with _guard.suspended():
        try:
            out = engine.int_mm(a.contiguous(), b.contiguous())
        except Int8confError:
            raise
        except Exception as e:  # noqa: BLE001 -- a user's kernel: one line for the CLI, cause chained
            raise OperandError(
                f"kernel {engine.kernel_name!r} int_mm raised {type(e).__name__}: {first_line(e, 200)} (M={a.shape[0]}, K={a.shape[1]}, N={b.shape[0]})"
            ) from e
    engine.mm_calls += 1
    if not isinstance(out, torch.Tensor) or out.dtype != torch.int32 or tuple(out.shape) != (a.shape[0], b.shape[0]):
        got = f"{getattr(out, 'dtype', type(out).__name__)} {list(getattr(out, 'shape', []))}"
        raise OperandError(
            f"kernel {engine.kernel_name!r} int_mm returned {got}, expected int32 [{a.shape[0]}, {b.shape[0]}]"
        )
    return out


def _mm(engine: Engine, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _mm32(engine, a, b).to(torch.int64)


def _linear(engine: Engine, q: torch.Tensor, tm: torch.Tensor, tk: torch.Tensor, name: str) -> torch.Tensor:
    """int8 linear + dyadic epilogue: round(acc tm m_n / 2^(tk + k_n)), one rounding."""
    acc, t = _mm(engine, q, engine.t[name + ".w"]), engine.t
    return intops.round_shift(acc * tm[:, None] * t[name + ".m"][None, :], tk[:, None] + t[name + ".k"][None, :])


def check_tokens(engine: Engine, tokens: torch.Tensor) -> None:
    """OperandError (one line) for a non-integer tensor or ids outside [0, vocab)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32):
        raise OperandError(
            f"token ids must be an int64/int32 tensor, got {getattr(tokens, 'dtype', type(tokens).__name__)}"
        )
    V = engine.dims["vocab"]
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= V):
        raise OperandError(f"token id out of range [0, {V}): min {int(tokens.min())}, max {int(tokens.max())}")


def forward(engine: Engine, tokens: torch.Tensor, n_new: Sequence[int], cache: KVCache) -> torch.Tensor:
    """One integer forward step (prefill chunk or decode) -> int32 logits [B, T, vocab] (units 2^-logit_exp).

    tokens: int [B, T]; row b's first n_new[b] ids (0 allowed) take cache positions length[b] ..., the rest
    is padding (never cached; its logits are meaningless); cache lengths advance. Raises OperandError:
    bad ids, context overflow, shape mismatch (one line).
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise OperandError(f"tokens must be a 2-D [B, T] tensor, got {getattr(tokens, 'shape', type(tokens).__name__)}")
    tokens = tokens.cpu()
    B, T = tokens.shape
    if len(n_new) != B or len(cache.length) != B:
        raise OperandError(f"batch mismatch: tokens {B} rows, n_new {len(n_new)}, cache {len(cache.length)}")
    for b in range(B):
        if not 0 <= n_new[b] <= T:
            raise OperandError(f"n_new[{b}]={n_new[b]} outside [0, {T}]")
        if cache.length[b] + n_new[b] > cache.capacity:
            raise OperandError(
                f"sequence {b}: {cache.length[b] + n_new[b]} tokens exceed the context of {cache.capacity} (model maximum {engine.max_context})"
            )
    valid = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        valid[b, : n_new[b]] = True
    check_tokens(engine, tokens[valid])
    tokens = torch.where(valid, tokens, torch.zeros_like(tokens)).to(engine.device)
    with _guard.float_guard(engine.guard):
        logits = _forward(engine, tokens, list(n_new), cache)
    for b in range(B):
        cache.length[b] += n_new[b]
    return logits


ATTN_BLOCK_ELEMS = 1 << 22  # score-matrix elements per attention block (memory bound)


def _attention(engine: Engine, i: int, qq, qtm, qtk, cache: KVCache, pos, n_new: list) -> torch.Tensor:
    """Attention of layer i as block-masked int8 GEMMs -> int64 [B, T, nh, hd] = P.V in units s_v / 2^15.

    Sequences are grouped up to ``ATTN_BLOCK_ELEMS`` score elements; within a group all query rows meet
    all cached key rows in one int_mm, and keys of another sequence or KV head, in the future, or beyond
    the cache length get ``ops.MASK_SENTINEL`` -> probability exactly 0 -> exactly 0 in ``ops.pv_matmul``,
    so a row's bits do not depend on the grouping. qq: int8 [B, T, nh, hd]; qtm/qtk: [B, T, nh]; pos: [B, T].
    """
    d, t, u = engine.dims, engine.t, engine.units
    B, T, nh, hd = qq.shape
    nkv = d["kv_heads"]
    group = nh // nkv
    dev = qq.device
    p = f"layers.{i}."
    lengths = [cache.length[b] + n_new[b] for b in range(B)]
    o = torch.zeros(B, T, nh, hd, dtype=torch.int64, device=dev)
    mm32 = lambda a_, b_: _mm32(engine, a_, b_)  # noqa: E731  (pv_matmul's int_mm)
    todo = [b for b in range(B) if n_new[b] > 0 and lengths[b] > 0]
    while todo:
        grp = [todo.pop(0)]
        while todo:
            L = max(lengths[b] for b in grp + [todo[0]])
            if (len(grp) + 1) ** 2 * nh * T * nkv * L > ATTN_BLOCK_ELEMS:
                break
            grp.append(todo.pop(0))
        G = len(grp)
        L = max(lengths[b] for b in grp)
        gi = torch.tensor(grp, dtype=torch.int64, device=dev)
        qa = qq[gi].permute(0, 2, 1, 3).reshape(G * nh * T, hd)  # rows (b, h, t)
        ka = cache.k[i][gi, :, :L, :].reshape(G * nkv * L, hd)  # cols (b, g, s)
        va = cache.v[i][gi, :, :L, :].reshape(G * nkv * L, hd)
        acc = _mm(engine, qa, ka)  # [G*nh*T, G*nkv*L]
        # per-row score dyadic: (Mq/127 * 2^-qk_exp) * s_k(g) / sqrt(hd) -> Q(score_exp)
        hh = torch.arange(nh, device=dev)
        sm = (qtm[gi] * t[p + "score.m"][hh // group][None, None, :]).permute(0, 2, 1).reshape(-1)
        sk = (qtk[gi] + t[p + "score.k"][hh // group][None, None, :]).permute(0, 2, 1).reshape(-1)
        sc = intops.round_shift(acc * sm[:, None], sk[:, None]).clamp(min=ops.MASK_SENTINEL + 1)
        rb = torch.arange(G, device=dev).repeat_interleave(nh * T)
        rg = (hh // group).repeat_interleave(T).repeat(G)
        rpos = pos[gi].repeat_interleave(nh, dim=0).reshape(-1)  # pos[b, t] for rows (b, h, t)
        cb = torch.arange(G, device=dev).repeat_interleave(nkv * L)
        cg = torch.arange(nkv, device=dev).repeat_interleave(L).repeat(G)
        cs = torch.arange(L, device=dev).repeat(G * nkv)
        lim = torch.tensor([lengths[b] for b in grp], dtype=torch.int64, device=dev)
        keep = (rb[:, None] == cb[None, :]) & (rg[:, None] == cg[None, :])
        keep = keep & (cs[None, :] <= rpos[:, None]) & (cs[None, :] < lim[rb][:, None])
        pr = ops.int_softmax(ops.mask_scores(sc, keep), u["score_exp"])  # int16 Q0.15
        tot = ops.pv_matmul(pr, va, mm32)  # [G*nh*T, hd]
        o[gi] = tot.reshape(G, nh, T, hd).permute(0, 2, 1, 3)
    return o


def _forward(engine: Engine, tokens: torch.Tensor, n_new: list, cache: KVCache) -> torch.Tensor:
    d, u, t = engine.dims, engine.units, engine.t
    dev = engine.device
    B, T = tokens.shape
    nh, nkv, hd = d["heads"], d["kv_heads"], d["head_dim"]
    qk_exp, rope_exp = u["qk_exp"], u["rope_exp"]
    base = torch.tensor(cache.length, dtype=torch.int64, device=dev)
    ar = torch.arange(T, dtype=torch.int64, device=dev)
    pos = (base[:, None] + ar[None, :]).clamp(max=engine.max_context - 1)  # [B, T]
    rpos = pos.reshape(-1, 1)  # [B*T, 1]
    # cache write indices of the valid new tokens
    vb = [b for b in range(B) for _ in range(n_new[b])]
    vt = [i for b in range(B) for i in range(n_new[b])]
    vb_t = torch.tensor(vb, dtype=torch.int64, device=dev)
    vt_t = torch.tensor(vt, dtype=torch.int64, device=dev)
    vpos = base[vb_t] + vt_t if vb else vt_t
    x = t["embed"][tokens.reshape(-1)]  # [BT, H] int64
    R = B * T
    for i, lc in enumerate(engine.artifact.config["layers"]):
        p = f"layers.{i}."
        q8, tm, tk = norm_quant(x, t[p + "attn_norm.g"], u["resid_eps"])
        y = _linear(engine, q8, tm, tk, p + "qkv")
        q = y[:, : nh * hd].reshape(R, nh, hd)
        k = y[:, nh * hd : (nh + nkv) * hd].reshape(R, nkv, hd)
        v8 = y[:, (nh + nkv) * hd :].clamp(-127, 127).to(torch.int8).reshape(B, T, nkv, hd)
        q = norm_fixed(q, t[p + "q_norm.g"], lc["q_norm_shift"], lc["q_norm_eps"], qk_exp)
        k = norm_fixed(k, t[p + "k_norm.g"], lc["k_norm_shift"], lc["k_norm_eps"], qk_exp)
        q, k = (ops.apply_rope(z, t["rope.cos"], t["rope.sin"], rpos, shift=rope_exp) for z in (q, k))
        k8 = intops.round_shift(k * t[p + "k_cache.m"][None, :, None], t[p + "k_cache.k"][None, :, None])
        k8 = k8.clamp(-127, 127).to(torch.int8).reshape(B, T, nkv, hd)
        if vb:
            cache.k[i][vb_t, :, vpos, :] = k8[vb_t, vt_t]
            cache.v[i][vb_t, :, vpos, :] = v8[vb_t, vt_t]
        qm = q.abs().amax(-1)  # [R, nh]
        qq = div_round_pos(127 * q, qm.clamp(min=1)[..., None]).to(torch.int8).reshape(B, T, nh, hd)
        qtm, qtk = normalize17(qm)
        qtm, qtk = qtm.reshape(B, T, nh), qtk.reshape(B, T, nh)
        o = _attention(engine, i, qq, qtm, qtk, cache, pos, n_new)
        oq, otm, otk = quant_rows(o.reshape(R, nh * hd))
        x = sat32(x + _linear(engine, oq, otm, otk, p + "o"))
        m8, tm, tk = norm_quant(x, t[p + "mlp_norm.g"], u["resid_eps"])
        gu = _linear(engine, m8, tm, tk, p + "gate_up").clamp(-(2**31 - 1), 2**31 - 1)  # int_swiglu: |.| < 2^31
        I = gu.shape[1] // 2
        fg, fu = lc["gate_exp"], lc["up_exp"]
        h = ops.int_swiglu(gu[:, :I], gu[:, I:], fg, fu, fg + fu)  # units 2^-(fg+fu)
        hq, htm, htk = quant_rows(h)
        x = sat32(x + _linear(engine, hq, htm, htk, p + "down"))
    f8, tm, tk = norm_quant(x, t["final_norm.g"], u["resid_eps"])
    logits = sat32(_linear(engine, f8, tm, tk, "lm_head"))
    return logits.to(torch.int32).reshape(B, T, -1)
