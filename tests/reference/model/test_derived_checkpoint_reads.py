"""A derived checkpoint is read, and its full SHA-256 state digest taken,
once per process while its files are unchanged (issue 7d: a sweep's
start-up resolved the same own / pow2 checkpoints five times and re-hashed
every tensor each time); a rewritten file is read and hashed again, and the
digest is the SHA-256 of the bytes either way."""

import os
import shutil

import pytest

import reference.model.compressed_tensors as CT
from reference.model import artifacts
from reference.model.checkpoint import load_qwen3_state, state_digest


@pytest.fixture
def own_copy(tmp_path):
    from reference.model.capture import default_capture_set

    cs = default_capture_set()
    if cs is None:
        pytest.skip("default captures not built")
    src = cs.checkpoint("own").dir
    dst = tmp_path / "own"
    shutil.copytree(src, dst)
    return dst, artifacts.parent_digest(cs.model_dir)


def test_an_unchanged_derived_checkpoint_is_read_and_hashed_once(own_copy, monkeypatch):
    d, pdigest = own_copy
    reads = []
    orig = CT.read_w8a8_checkpoint
    monkeypatch.setattr(CT, "read_w8a8_checkpoint", lambda p: (reads.append(str(p)), orig(p))[1])
    artifacts._read_cached.cache_clear()
    first = artifacts._valid_entry(d, pdigest)
    second = artifacts._valid_entry(d, pdigest)
    assert first is not None and second is first and reads == [str(d)] and first.dir == d
    # the recorded digest is the SHA-256 state digest of the files' tensors
    want = state_digest(load_qwen3_state(d)[1])
    assert first.digest == want == first.meta["state_digest"]
    # a rewritten file (new mtime) is read and hashed again
    f = sorted(d.glob("*.safetensors"))[0]
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    third = artifacts._valid_entry(d, pdigest)
    assert len(reads) == 2 and third is not first and third.digest == want
    # the parent check still runs on a memoized read: another parent's digest is refused
    assert artifacts._valid_entry(d, "0" * 64) is None and len(reads) == 2
