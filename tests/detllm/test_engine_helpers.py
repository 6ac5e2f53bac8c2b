"""detllm engine helpers vs the frozen primitives of detllm.intops:
the engine's faster isqrt / bit length / positive-divisor rounding must give
exactly the same integers (so the engine's rounding rules are the README's)."""

import torch

from detllm import intops
from detllm.engine import _bitlen, div_round_pos, isqrt_newton, normalize17, ratio_dyadic


def _g():
    return torch.Generator().manual_seed(1234)


def test_isqrt_newton_equals_intops_isqrt():
    g = _g()
    roots = torch.randint(0, 2**31, (3000,), generator=g)
    sq = roots * roots
    edge = torch.tensor([0, 1, 2, 3, 4, 8, 9, 15, 16, 17, 2**62 - 1, 2**61, 2**60 - 1])
    n = torch.cat(
        [
            edge,
            sq,
            sq + 1,
            (sq - 1).clamp(min=0),
            torch.randint(0, 2**62, (20000,), generator=g),
            torch.randint(0, 2**16, (5000,), generator=g),
        ]
    )
    n = n[n < 2**62]
    assert torch.equal(isqrt_newton(n), intops.isqrt(n))
    assert isqrt_newton(torch.tensor([2**62 - 1])).item() == 2147483647


def test_bitlen_equals_ilog2_plus_one():
    g = _g()
    x = torch.cat([torch.tensor([0, 1, 2, 3, 4, 2**62, 2**63 - 1]), torch.randint(0, 2**62, (5000,), generator=g)])
    assert torch.equal(_bitlen(x), intops.ilog2_or(x, -1) + 1)
    assert _bitlen(torch.tensor([[0, 1], [255, 256]])).tolist() == [[0, 1], [8, 9]]


def test_div_round_pos_equals_intops_div_round():
    g = _g()
    a = torch.cat([torch.randint(-(2**50), 2**50, (20000,), generator=g), torch.arange(-40, 41)])
    b = torch.cat([torch.randint(1, 2**40, (20000,), generator=g), torch.full((81,), 4)])
    assert torch.equal(div_round_pos(a, b), intops.div_round(a, b))
    # ties away from zero
    assert div_round_pos(torch.tensor([5, -5, 6, -6]), torch.tensor([2, 2, 4, 4])).tolist() == [3, -3, 2, -2]


def test_ratio_dyadic_and_normalize17():
    num = torch.tensor([0, 1, 3, 10**12, 2**40 + 12345])
    den = torch.tensor([7, 3, 1, 999983, 3])
    m, k = ratio_dyadic(num, den)
    assert m[0] == 0 and k[0] == 0
    for i in range(1, 5):
        assert 2**15 <= int(m[i]) <= 2**17
        exact = int(num[i]) / int(den[i])
        assert abs(int(m[i]) * 2.0 ** -int(k[i]) / exact - 1) <= 2**-15
    v = torch.tensor([0, 5, 2**17 - 1, 2**17, 2**40 + 2**22])
    m, k = normalize17(v)
    assert m.tolist()[:4] == [0, 5, 2**17 - 1, 2**16] and k.tolist()[:4] == [0, 0, 0, -1]
    # 2^40 + 2^22 has 41 bits -> shift 24: round(2^16 + 1/4) = 2^16
    assert (int(m[4]), int(k[4])) == (2**16, -24)


def test_chunk_tokens_pads_right_and_starts_at_each_cache_length():
    from detllm.generate import chunk_tokens, prefill_chunks

    prompts = [[5, 6, 7, 8, 9], [1, 2], [3, 4, 4]]
    chunks = [prefill_chunks(len(p), 2) for p in prompts]  # [2,2,1], [2], [2,1]
    lengths = [0, 0, 0]
    got = []
    for c in range(3):
        sizes, toks = chunk_tokens(prompts, chunks, c, lengths)
        assert toks.dtype == torch.int64
        got.append((sizes, toks.tolist()))
        lengths = [n + s for n, s in zip(lengths, sizes)]
    assert got == [
        ([2, 2, 2], [[5, 6], [1, 2], [3, 4]]),
        ([2, 0, 1], [[7, 8], [0, 0], [4, 0]]),
        ([1, 0, 0], [[9], [0], [0]]),
    ]
