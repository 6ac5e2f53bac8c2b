"""The built cases kept in the artifact cache (``conformance.cases.cache``): a second build of the same
code and label loads the same operands (bits, strides, meta), anything else builds."""

from __future__ import annotations

import fcntl

import torch

from conformance.cases import cache as case_cache
from conformance.cases import make_case


def _build(calls):
    def build():
        calls.append(1)
        c = make_case("ordinary", seed=3)
        c.b = torch.zeros((c.k + 3, c.n), dtype=torch.int8)[: c.k].t()  # a padded, transposed view
        c.meta["note"] = {"nested": [1, 2]}
        return [c, make_case("tails", seed=0)]

    return build


def test_a_second_build_loads_the_same_cases(tmp_path, monkeypatch):
    monkeypatch.setenv("INT8CONF_CACHE", str(tmp_path))
    calls: list = []
    first = case_cache.cached_cases("t/1", _build(calls))
    again = case_cache.cached_cases("t/1", _build(calls))
    assert len(calls) == 1 and len(list((tmp_path / "cases").glob("*.pt"))) == 1
    for a, b in zip(first, again):
        assert a.digests() == b.digests() and a.layouts() == b.layouts() and a.meta == b.meta
        assert (a.b.stride(), a.name, a.out_dtype) == (b.b.stride(), b.name, b.out_dtype)
    assert again[0].b.stride() == (1, again[0].n) and again[0] is not first[0]
    case_cache.cached_cases("t/2", _build(calls))  # another label builds
    monkeypatch.setenv("INT8CONF_CASE_CACHE", "0")
    case_cache.cached_cases("t/1", _build(calls))  # switched off: builds
    assert len(calls) == 3


def test_only_the_newest_entries_stay(tmp_path, monkeypatch):
    monkeypatch.setenv("INT8CONF_CACHE", str(tmp_path))
    calls: list = []
    for i in range(case_cache.KEEP + 2):
        case_cache.cached_cases(f"t/{i}", _build(calls))
    assert len(list((tmp_path / "cases").glob("*.pt"))) == case_cache.KEEP
    assert not list((tmp_path / "cases").glob("*.tmp"))


def test_an_unreadable_entry_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("INT8CONF_CACHE", str(tmp_path))
    calls: list = []
    case_cache.cached_cases("t/1", _build(calls))
    (entry,) = (tmp_path / "cases").glob("*.pt")
    entry.write_bytes(b"not a torch file")
    assert len(case_cache.cached_cases("t/1", _build(calls))) == 2 and len(calls) == 2


def test_the_build_holds_the_entrys_lock_so_concurrent_builders_wait(tmp_path, monkeypatch):
    monkeypatch.setenv("INT8CONF_CACHE", str(tmp_path))
    seen: list = []

    def build():
        (lock,) = (tmp_path / "cases").glob("*.lock")
        with open(lock) as other:  # another process's descriptor: cannot take the lock while this build runs
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("free")
            except BlockingIOError:
                seen.append("held")
        return _build([])()

    case_cache.cached_cases("t/lock", build)
    (lock,) = (tmp_path / "cases").glob("*.lock")
    with open(lock) as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after the build
    assert seen == ["held"]


def test_c7_references_are_computed_once_across_runs(tmp_path, monkeypatch):
    """C7's reference replay and envelope (CPU forwards of the model) go to the artifact cache: a later run (here:
    an empty in-process memo) loads them; a different key computes."""
    from conformance.checks import token_flip

    monkeypatch.setenv("INT8CONF_CACHE", str(tmp_path))
    calls: list = []

    def compute():
        calls.append(1)
        return {"threshold": 0.25, "argmax": torch.arange(6).reshape(2, 3)}

    key = ("model", (("model.safetensors", 10, 5),), "own", "ab12", "triton", 8)
    first = token_flip._bounded({}, key, compute)
    again = token_flip._bounded({}, key, compute)  # a fresh process: its memo is empty
    assert len(calls) == 1 and again["threshold"] == 0.25 and torch.equal(again["argmax"], first["argmax"])
    assert len(list((tmp_path / "model-references").glob("*.pt"))) == 1
    token_flip._bounded({}, key[:-1] + (4,), compute)  # another batch size: computed
    assert len(calls) == 2
