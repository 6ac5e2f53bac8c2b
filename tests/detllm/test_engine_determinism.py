"""detllm determinism acceptance: zero tolerance, torch.equal /
identical hashes, on a tiny random Qwen3 (2 blocks, hidden 256, 4/2 heads,
head_dim 64, vocab 512, context 256).

Covered: ten repeated runs; one prompt alone vs in batches of 2, 8, 32 with
random co-prompts (any slot); prefill vs token-by-token and every two-chunk
split point; the whole context (256 positions); CPU reference vs every
built-in kernel on the CPU (triton under the interpreter on a small case);
the hash equals an independent SHA-256 recomputation from the logits.
"""

import hashlib

import numpy as np
import pytest
import torch
from shipped_pins import DEFAULT_DIGEST, DEFAULT_GENERATED, DEFAULT_LOGITS, DEFAULT_TOKENS, shipped_sonnet

from detllm import engine as E
from detllm import generate as G
from detllm.prepare import PrepareOptions, make_tiny_model, prepare


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("det_det")
    md = make_tiny_model(d / "model", seed=2)
    a = prepare(md, d / "art", PrepareOptions(calib_windows=4, calib_len=32, calib_source="random"))
    yield a
    torch.set_num_threads(prev)


@pytest.fixture(scope="module")
def eng(art):
    return E.load_engine(art, guard=False)


def _rand_prompts(n, seed, lo=1, hi=30):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g)
    return [torch.randint(0, 512, (int(L),), generator=g).tolist() for L in lens]


PROMPT = [17, 301, 5, 77, 480, 2, 2, 9, 150, 333, 64, 12, 511]
NEW = 6


@pytest.fixture(scope="module")
def alone(eng):
    return G.generate(eng, [PROMPT], NEW, keep_logits=True)


def test_hash_is_chained_sha256_of_int32_logits(alone):
    """Independent recomputation of both chained hashes from the kept logits."""
    rows = alone.logits[0]
    assert rows.dtype == torch.int32 and rows.shape == (len(PROMPT) + NEW - 1, 512)
    h = hashlib.sha256(b"detllm-logits-v1").digest()
    for r in rows:
        h = hashlib.sha256(h + np.asarray(r.numpy(), dtype="<i4").tobytes()).digest()
    assert h.hex() == alone.logits_hash[0]
    t = hashlib.sha256(b"detllm-tokens-v1").digest()
    for tok in alone.generated[0]:
        t = hashlib.sha256(t + int(tok).to_bytes(4, "little", signed=True)).digest()
    assert t.hex() == alone.token_hash[0]
    # greedy: each generated token is the smallest id among the maxima of the previous row
    last = rows[len(PROMPT) - 1 :]
    for i, tok in enumerate(alone.generated[0]):
        mx = last[i].max()
        assert tok == int((last[i] == mx).nonzero()[0])


def test_ten_repeated_runs_identical(eng, alone):
    for _ in range(10):
        r = G.generate(eng, [PROMPT], NEW)
        assert r.logits_hash == alone.logits_hash and r.token_hash == alone.token_hash


@pytest.mark.parametrize("batch,slot", [(2, 1), (8, 0), (8, 5), (32, 17)])
def test_prompt_alone_equals_prompt_in_padded_batch(eng, alone, batch, slot):
    co = _rand_prompts(batch - 1, seed=batch * 100 + slot)
    ps = co[:slot] + [PROMPT] + co[slot:]
    r = G.generate(eng, ps, NEW, keep_logits=True)
    assert torch.equal(r.logits[slot], alone.logits[0])
    assert r.logits_hash[slot] == alone.logits_hash[0] and r.token_hash[slot] == alone.token_hash[0]
    # the co-prompts are what they are alone, too (spot-check one)
    j = 0 if slot else 1
    assert G.generate(eng, [ps[j]], NEW).logits_hash[0] == r.logits_hash[j]


def test_prefill_equals_token_by_token_at_every_position(eng, alone):
    tok = G.generate(eng, [PROMPT], NEW, schedule="token", keep_logits=True)
    assert tok.forward_calls == len(PROMPT) + NEW - 1
    assert torch.equal(tok.logits[0], alone.logits[0])  # row by row: every position
    assert tok.logits_hash == alone.logits_hash
    for k in range(1, len(PROMPT)):  # every two-chunk split point
        r = G.generate(eng, [PROMPT], NEW, schedule=[k, len(PROMPT) - k])
        assert r.logits_hash == alone.logits_hash, k
    assert G.generate(eng, [PROMPT], NEW, schedule=4).logits_hash == alone.logits_hash


def test_mixed_schedules_in_one_batch(eng, alone):
    """Batch members at different prefill stages (token-by-token batch of
    different lengths: short prompts idle while long ones still prefill)."""
    co = _rand_prompts(3, seed=9, lo=2, hi=25)
    r = G.generate(eng, co + [PROMPT], NEW, schedule="token")
    assert r.logits_hash[3] == alone.logits_hash[0]


def test_whole_context(art, eng):
    """A context as long as the model allows: 256 positions (250-token prompt + 6 new),
    one prefill vs prefill in chunks of 64 (+ batch of 2)."""
    ctx = art.config["model"]["max_position"]
    assert ctx == 256
    p = _rand_prompts(1, seed=11, lo=ctx - NEW, hi=ctx - NEW + 1)[0]
    assert len(p) + NEW - 1 == ctx - 1
    a = G.generate(eng, [p], NEW + 1, keep_logits=True)  # uses all 256 positions
    assert a.logits[0].shape[0] == ctx
    b = G.generate(eng, [p, PROMPT], NEW + 1, schedule=64)
    assert b.logits_hash[0] == a.logits_hash[0]


def test_kernels_on_cpu_match_reference(art, alone):
    from conformance.kernels.registry import builtin_available, get_kernel

    for name in ("cpu", "int_mm"):
        if not builtin_available(name)[0]:
            continue
        e = E.load_engine(art, get_kernel(name), "cpu", guard=False)
        r = G.generate(e, [PROMPT], NEW)
        assert r.logits_hash == alone.logits_hash, name
        assert e.mm_calls > 0


def test_triton_interpreter_small_case(art, eng):
    from conformance.kernels.registry import builtin_available, get_kernel

    ok, why = builtin_available("triton")
    if not ok:
        pytest.skip(f"triton unavailable: {why}")
    p = PROMPT[:5]
    ref = G.generate(eng, [p], 2)
    e = E.load_engine(art, get_kernel("triton"), "cpu", guard=False)
    assert G.generate(e, [p], 2).logits_hash == ref.logits_hash


@pytest.mark.cuda
def test_cuda_kernels_match_cpu_reference(art, alone):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from conformance.kernels.registry import get_kernel

    for name in ("int_mm", "triton"):
        e = E.load_engine(art, get_kernel(name), "cuda", guard=False)
        assert G.generate(e, [PROMPT], NEW).logits_hash == alone.logits_hash, name


def test_default_model_pinned_hash(art):  # `art` fixture: single-threaded torch for this module
    from detllm.artifact import is_artifact_dir, load_artifact
    from detllm.prepare import SHIPPED_DIR, model_fingerprint
    from reference.model.assets import default_model_dir
    from reference.model.checkpoint import is_qwen3_dir
    from reference.model.corpus import prompts
    from reference.model.tokenizer import encode, load_tokenizer

    md = default_model_dir()
    if not (is_qwen3_dir(md) and is_artifact_dir(SHIPPED_DIR)):
        pytest.skip("default model or shipped artifact not present")
    art = load_artifact(SHIPPED_DIR)
    if art.config["source"]["fingerprint"] != model_fingerprint(md):
        pytest.skip("default model changed since the artifact was shipped (re-run detllm prepare)")
    assert art.digest == DEFAULT_DIGEST
    tok = load_tokenizer()
    ids = encode(tok, prompts()[0])
    r = G.generate(E.load_engine(art, guard=True), [ids], 16)
    assert (r.logits_hash[0], r.token_hash[0]) == (DEFAULT_LOGITS, DEFAULT_TOKENS)
    assert r.generated[0] == DEFAULT_GENERATED
    # same pinned hashes in a batch of 32 (slot 20, random co-prompts) and token by token
    eng = E.load_engine(art, guard=False)
    g = torch.Generator().manual_seed(32)
    co = [
        torch.randint(0, art.config["model"]["vocab"], (int(n),), generator=g).tolist()
        for n in torch.randint(1, 40, (31,), generator=g)
    ]
    r32 = G.generate(eng, co[:20] + [ids] + co[20:], 16)
    assert (r32.logits_hash[20], r32.token_hash[20]) == (DEFAULT_LOGITS, DEFAULT_TOKENS)
    assert G.generate(eng, [ids], 16, schedule="token").logits_hash[0] == DEFAULT_LOGITS


@pytest.mark.cuda
@pytest.mark.parametrize("kernel", ["int_mm", "triton"])
def test_cuda_default_model_pinned_hash(art, kernel):
    """On a GPU the CUDA kernels reproduce the CPU-pinned hashes of the
    shipped artifact (Sonnet 18, 16 tokens), alone, in a batch of 8 and token
    by token."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from conformance.kernels.registry import get_kernel

    shipped, ids = shipped_sonnet()
    eng = E.load_engine(shipped, get_kernel(kernel), "cuda", guard=False)
    r = G.generate(eng, [ids], 16)
    assert (r.logits_hash[0], r.token_hash[0]) == (DEFAULT_LOGITS, DEFAULT_TOKENS)
    g = torch.Generator().manual_seed(8)
    co = [
        torch.randint(0, shipped.config["model"]["vocab"], (int(n),), generator=g).tolist()
        for n in torch.randint(1, 40, (7,), generator=g)
    ]
    r8 = G.generate(eng, co[:3] + [ids] + co[3:], 16)
    assert r8.logits_hash[3] == DEFAULT_LOGITS
    assert G.generate(eng, [ids], 16, schedule="token").logits_hash[0] == DEFAULT_LOGITS


def test_shipped_sonnet_is_the_pinned_artifact_and_its_prompt():
    # the helper the CUDA tests share, exercised where there is no GPU
    from reference.model.corpus import prompts
    from reference.model.tokenizer import encode, load_tokenizer

    shipped, ids = shipped_sonnet()
    assert shipped.digest == DEFAULT_DIGEST
    assert ids == encode(load_tokenizer(), prompts()[0]) and len(ids) > 0
