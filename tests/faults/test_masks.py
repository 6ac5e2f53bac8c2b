"""Coverage masks: counts, the specified random stream, determinism, no global RNG."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest
import torch

from faults import COVERAGES, FaultError
from faults.mask import (
    block_counts,
    block_selection,
    element_mask,
    lowest,
    lowest_of,
    prefetch_element_masks,
    selected_count,
    stream_key,
)

MASK64 = (1 << 64) - 1


def splitmix_py(x: int) -> int:
    """SplitMix64 of x + gamma in plain Python integers (reference for the numpy one)."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def test_splitmix_known_values():
    # first outputs of SplittableRandom / splitmix64 seeded with 0 (Vigna's reference code)
    assert splitmix_py(0) == 0xE220A8397B1DCDAF
    assert splitmix_py(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4


def test_coverage_counts():
    assert [selected_count(64, 384, c) for c in COVERAGES] == [1, 246, 24576]
    assert selected_count(10, 10, "1%") == 1  # 1.0
    assert selected_count(15, 10, "1%") == 2  # 1.5 rounds half up
    assert selected_count(7, 7, "1%") == 1  # 0.49 -> at least one
    assert selected_count(25, 10, "1%") == 3  # 2.5 -> 3
    assert selected_count(1, 1, "all") == 1
    for c in COVERAGES:
        m = element_mask(64, 384, "case", "F4", c, 0)
        assert m.dtype == torch.bool and m.shape == (64, 384)
        assert int(m.sum()) == selected_count(64, 384, c)
    with pytest.raises(FaultError):
        selected_count(4, 4, "5%")


def test_one_element_is_the_lowest_score_of_the_specified_stream():
    m, n = 5, 7
    key_text = "int8conf-fault-mask/1|abc|F2|one|3|elements"
    key = int.from_bytes(hashlib.sha256(key_text.encode()).digest()[:8], "little")
    assert key == stream_key("abc", "F2", "one", 3)
    sc = [splitmix_py((key + i) & MASK64) for i in range(m * n)]
    want = min(range(m * n), key=lambda i: (sc[i], i))
    got = element_mask(m, n, "abc", "F2", "one", 3).reshape(-1).nonzero().reshape(-1).tolist()
    assert got == [want]
    # 1% of 20 x 15 = 3 elements: the three lowest scores
    key = stream_key("abc", "F2", "1%", 3)
    sc = [splitmix_py((key + i) & MASK64) for i in range(300)]
    want3 = sorted(sorted(range(300), key=lambda i: (sc[i], i))[:3])
    got3 = element_mask(20, 15, "abc", "F2", "1%", 3).reshape(-1).nonzero().reshape(-1).tolist()
    assert got3 == want3


def test_masks_are_deterministic_and_leave_global_rngs_alone():
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(9)
    states = (torch.get_rng_state().clone(), np.random.get_state()[1].copy(), random.getstate())
    a = element_mask(64, 384, "case-x", "F4", "1%", 0)
    torch.manual_seed(999)  # global state must not matter
    b = element_mask(64, 384, "case-x", "F4", "1%", 0)
    assert torch.equal(a, b)
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(9)
    element_mask(64, 384, "case-x", "F4", "1%", 0)
    assert torch.equal(torch.get_rng_state(), states[0])
    assert (np.random.get_state()[1] == states[1]).all() and random.getstate() == states[2]
    # every input of the key matters
    for other in (("case-y", "F4", "1%", 0), ("case-x", "F3", "1%", 0), ("case-x", "F4", "1%", 1)):
        assert not torch.equal(a, element_mask(64, 384, *other))


def test_block_selection_counts_and_determinism():
    assert block_counts(64, 384, "one") == (1, 1)
    assert block_counts(64, 384, "1%") == (6, 41)  # 6 * 41 = 246 = 1% of 24576
    assert block_counts(64, 384, "all") == (64, 384)
    assert block_counts(16, 16, "1%") == (2, 2)  # T = 3: r = 2, c = floor(1.5 + .5) = 2
    assert block_counts(3, 5, "1%") == (1, 1)
    r1, c1 = block_selection(64, 384, "k", "F6", "1%", 2)
    r2, c2 = block_selection(64, 384, "k", "F6", "1%", 2)
    assert torch.equal(r1, r2) and torch.equal(c1, c2)
    assert len(r1) == 6 and len(c1) == 41 and r1.tolist() == sorted(set(r1.tolist()))


def test_lowest_of_equals_a_stable_argsort_prefix_with_ties():
    rng = np.random.default_rng(0)
    for n, count, hi in [(50, 1, 5), (50, 7, 5), (200, 30, 3), (1000, 10, 2**62)]:
        s = rng.integers(0, hi, n).astype(np.uint64)  # many ties when hi is small
        want = np.sort(np.argsort(s, kind="stable")[:count])
        assert lowest_of(s, count).tolist() == want.tolist()


def test_prefetched_masks_are_the_masks_drawn_in_the_call():
    keys = [(9, 13, "prefetch-case", f, cov, 3) for f in ("F1", "F8") for cov in COVERAGES]
    drawn = {}
    for k in keys:  # the definition, drawn here
        flat = torch.zeros(9 * 13, dtype=torch.bool)
        flat[torch.from_numpy(lowest(9 * 13, selected_count(9, 13, k[4]), stream_key(*k[2:])))] = True
        drawn[k] = flat.reshape(9, 13)
    prefetch_element_masks(keys + keys[:2])  # a key asked twice is drawn once
    got = {k: element_mask(*k) for k in keys}  # waits for the ones still being drawn
    for k in keys:
        assert torch.equal(got[k], drawn[k]) and got[k].dtype == torch.bool, k
        assert int(got[k].sum()) == selected_count(9, 13, k[4])
        got[k][0, 0] = not bool(got[k][0, 0])  # a fresh copy: the memoized mask is untouched
        assert torch.equal(element_mask(*k), drawn[k])
