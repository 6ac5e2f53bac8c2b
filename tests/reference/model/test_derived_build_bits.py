"""A ``--model`` capture's prelude builds each derived checkpoint once, reads none of them back, runs the
reconstruction gate at most once per parent and own checkpoint, and hashes each tensor once; the bytes stay those of
the straightforward path (build, write, read back, gate per pow2 kind): pinned file and state digests of a tiny
random model, its capture manifest and layer files, and every returned checkpoint equal to a read of its files."""

import hashlib
import json

import pytest
import torch

import reference.model.compressed_tensors as CT
from reference import memo
from reference.model import artifacts
from reference.model.artifacts import KINDS, derived_checkpoint
from reference.model.capture import capture_model
from reference.model.checkpoint import write_random_qwen3
from reference.operands import tensor_digest, tensor_digests

# The straightforward path's results for write_random_qwen3(seed=3) (state digests; sha256 of each file).
DIGESTS = {
    "own": "a63f200f15ceb3996b383e1cc37c0322a43229971567c4a2c1f2eded1834588c",
    "pow2-nearest": "24494e26fbb87799e7ce950e9850c318d466c53a3f142178cc71a5828a8a8c4e",
    "pow2-ceiling": "3af31bcea6fc0cd3dab9aa1f21db21d28dc9f3a0862215d20033975a71c0e9e7",
}
FILES = {
    "own": (
        "03364e567e62b401d248a01a141ae3d8582b5cf55759be45b47c4d0d5a97c9ec",
        "96430d945780c8205b19a920b9bd45f27ddc32df111b5a7ed43e2e32e41ee8ef",
    ),
    "pow2-nearest": (
        "7aa82bd745a9e5e062d0765df69cd59b9e05ee84f86a8714540f47d997b613f3",
        "403c3a3b4c28d43660cb80480269e22a425dc275a808f96f5ede406d9611e569",
    ),
    "pow2-ceiling": (
        "35f061beefd25b8a5fc991a2bdcd0455654e026ce266ec32d129ed9c6bb02e06",
        "b1c95baeb0ca0e248f689df22daa5a5c19e7b1d48dc379e59a74f1eb3b1a35f2",
    ),
}
# sha256 of the manifest (sorted JSON, model dir left out) and of {layer file: sha256} of the capture below.
MANIFEST_SHA = "2f7d8f44b88d32464396765866fe8d3759fc4ace4dd016830f5d1000de49ce19"
LAYER_FILES_SHA = "41452b4d9b04983c86a4be04cbeea0c294bd28485a477bbac954e804ad1d42b2"
IDS = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(11))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fresh_process(monkeypatch):
    """The process-wide memos of ``artifacts`` emptied (as in a new process), reads and gates counted."""
    calls = {"reads": [], "gates": 0}
    orig_read, orig_gate = CT.read_w8a8_checkpoint, artifacts.reconstruction_gate

    def gate(*a, **k):
        calls["gates"] += 1
        return orig_gate(*a, **k)

    monkeypatch.setattr(CT, "read_w8a8_checkpoint", lambda p: (calls["reads"].append(str(p)), orig_read(p))[1])
    monkeypatch.setattr(artifacts, "reconstruction_gate", gate)
    monkeypatch.setattr(artifacts, "_BUILT", {})
    monkeypatch.setattr(artifacts, "_GATES", {})
    artifacts._read_cached.cache_clear()
    return calls


def test_derived_checkpoints_keep_their_bits_and_are_built_without_read_back(tmp_path, fresh_process):
    parent = write_random_qwen3(tmp_path / "parent", seed=3)
    cks = {k: derived_checkpoint(parent, k, tmp_path / "cache") for k in KINDS}
    assert fresh_process == {"reads": [], "gates": 0}  # own built here: the gate's rebuild is the build
    for kind, ck in cks.items():
        assert ck.digest == ck.meta["state_digest"] == DIGESTS[kind]
        assert tuple(_sha((ck.dir / f).read_bytes()) for f in ("config.json", "model.safetensors")) == FILES[kind]
        assert derived_checkpoint(parent, kind, tmp_path / "cache") is ck  # not read again
        read = CT.read_w8a8_checkpoint(ck.dir)  # what a read of the files gives, field by field
        assert (read.dir, read.config, read.quantization_config) == (ck.dir, ck.config, ck.quantization_config)
        assert (read.activation_scheme, read.digest, read.meta) == (ck.activation_scheme, ck.digest, ck.meta)
        got, want = ck.tensors(), read.tensors()
        assert sorted(got) == sorted(want)
        assert {n: tensor_digest(t) for n, t in got.items()} == {n: tensor_digest(t) for n, t in want.items()}
    # a new process with the own checkpoint cached: read once, gated once for both pow2 kinds, the same bytes
    for kind in KINDS[1:]:
        for f in cks[kind].dir.iterdir():
            f.unlink()
        cks[kind].dir.rmdir()
    artifacts._BUILT.clear()
    artifacts._GATES.clear()
    artifacts._read_cached.cache_clear()
    fresh_process["reads"].clear()
    again = {k: derived_checkpoint(parent, k, tmp_path / "cache") for k in KINDS[1:]}
    assert fresh_process == {"reads": [str(cks["own"].dir)], "gates": 1}
    for kind, ck in again.items():
        assert ck.digest == DIGESTS[kind]
        assert tuple(_sha((ck.dir / f).read_bytes()) for f in ("config.json", "model.safetensors")) == FILES[kind]


def test_a_capture_keeps_its_bits(tmp_path, fresh_process):
    parent = write_random_qwen3(tmp_path / "parent", seed=3)
    cs = capture_model(parent, tmp_path / "cap", input_ids=IDS, tokens_per_window=8, cache=tmp_path / "cache")
    man = dict(cs.manifest, model={k: v for k, v in cs.manifest["model"].items() if k != "dir"})
    assert _sha(json.dumps(man, sort_keys=True).encode()) == MANIFEST_SHA
    assert json.loads((cs.dir / "manifest.json").read_text()) == cs.manifest
    layer_files = {p.name: _sha(p.read_bytes()) for p in sorted(cs.dir.glob("model.layers.*"))}
    assert _sha(json.dumps(layer_files, sort_keys=True).encode()) == LAYER_FILES_SHA
    assert fresh_process["gates"] == 0


def _layouts() -> list:
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    return [
        base,
        base.t(),
        base[:, 2:7],
        base[2:3, 4:5],  # one element, strides of the view
        base.to(torch.bfloat16),
        torch.tensor(3.5),
        torch.zeros(1).expand(5),
        torch.empty(0, 4),
        torch.arange(-8, 8, dtype=torch.int8).reshape(4, 4)[:, ::2],
        None,
    ]


def _independent(t) -> str:
    if t is None:
        return "none"
    h = hashlib.sha256(f"{t.dtype};{','.join(str(s) for s in t.shape)};".encode())
    h.update(bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist()))
    return h.hexdigest()


@pytest.mark.parametrize("scoped", [False, True])
def test_tensor_digests_in_threads_are_the_digests(scoped):
    ts = _layouts()
    want = [_independent(t) for t in ts]
    if scoped:
        with memo.scope():
            assert tensor_digests(ts, threads=4) == want
            assert [tensor_digest(t) for t in ts] == want  # remembered
    else:
        assert tensor_digests(ts, threads=4) == want == [tensor_digest(t) for t in ts]


def test_a_kept_device_copy_is_reused_and_no_other_is_kept():
    t = torch.ones(3, 4)
    first = memo.moved_if_kept(t, "meta")
    assert first.device.type == "meta" and memo.moved_if_kept(t, "meta") is not first  # no scope: nothing kept
    with memo.scope():
        assert memo.moved_if_kept(t, "meta") is not memo.moved_if_kept(t, "meta")  # not kept by itself
        kept = memo.moved(t, "meta")
        assert memo.moved_if_kept(t, "meta") is kept and memo.moved_if_kept(t, "cpu") is t
