"""Layer capture and replay."""

import json
import shutil

import pytest
import torch

from reference.errors import CaptureError, CheckpointError
from reference.model.artifacts import KINDS, derived_checkpoint
from reference.model.capture import (
    MANIFEST,
    capture_model,
    forward_f64,
    iter_layer_operands,
    load_capture_set,
    token_positions,
)
from reference.model.checkpoint import load_qwen3_state, save_safetensors_atomic, write_random_qwen3
from reference.quantize import quantize_activation_per_token

IDS = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(11))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("capture")
    parent = write_random_qwen3(root / "parent", seed=5)
    cache = root / "cache"
    cs = capture_model(parent, root / "cap", input_ids=IDS, tokens_per_window=8, cache=cache)
    return root, parent, cache, cs


def test_positions():
    assert token_positions(32, 8) == [0, 4, 9, 13, 18, 22, 27, 31]
    assert token_positions(4, 16) == [0, 1, 2, 3]


def test_manifest_and_operands(env):
    root, parent, cache, cs = env
    man = cs.manifest
    assert man["complete"] and man["summary"]["layers"] == 14
    assert man["settings"]["tokens_per_layer"] == 16 and man["settings"]["engine"] == "f64"
    assert cs.layer_names()[:2] == ["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj"]
    assert cs.layer_names()[-1] == "model.layers.1.mlp.down_proj"
    _, state = load_qwen3_state(parent)
    for mode, kind in (("own", "own"), ("pow2", "pow2-nearest")):
        ops = list(iter_layer_operands(cs, mode))
        assert [o.name for o in ops] == cs.layer_names()
        for o in ops:
            e = man["layers"][o.name]
            assert (o.m, o.k, o.n) == (16, e["K"], e["N"])
            assert o.scale_mode == mode and o.meta["kind"] == kind and o.bias is None
            d = o.digests()
            assert d["a"] == e["digests"]["a"] and d["scale_a"] == e["digests"]["scale_a"]
            assert d["b"] == e["weights"][kind]["b"] and d["scale_b"] == e["weights"][kind]["scale_b"]
            assert o.b.dtype == torch.int8 and o.scale_b.dtype == torch.float32 and o.scale_b.shape == (o.n,)
            # observed accumulator, recomputed independently in int64
            acc = (o.a.long()[:, None, :] * o.b.long()[None, :, :]).sum(-1)
            assert int(acc.abs().max()) == e["acc_absmax"][kind] == o.meta["acc_absmax"]
    down = cs.load_layer("model.layers.0.mlp.down_proj")
    assert down["x"].dtype == torch.bfloat16 and down["x"].shape == (16, 1536)
    a, sa = quantize_activation_per_token(down["x"])
    assert torch.equal(a, down["a"]) and torch.equal(sa, down["scale_a"])
    # q_proj's input at (window 0, position 0) = RMSNorm(embedding of token 0), rounded to bf16
    x0 = state["model.embed_tokens.weight"][IDS[0, 0]].double()
    g = state["model.layers.0.input_layernorm.weight"].double()
    want = (x0 * torch.rsqrt(x0.pow(2).mean() + 1e-6) * g).to(torch.bfloat16)
    assert torch.equal(cs.load_layer("model.layers.0.self_attn.q_proj")["x"][0], want)


def test_f64_forward_matches_transformers(env):
    transformers = pytest.importorskip("transformers")
    _, parent, _, _ = env
    config, state = load_qwen3_state(parent)
    ours = forward_f64(config, state, IDS[:1])
    model = transformers.Qwen3ForCausalLM.from_pretrained(str(parent), dtype=torch.float64)
    with torch.no_grad():
        theirs = model(input_ids=IDS[:1]).logits
    # HF computes RMSNorm/softmax/RoPE tables in float32 internally
    assert (ours - theirs).abs().max() < 1e-4 * theirs.abs().max()


def test_resume_keeps_finished_layers(env, tmp_path):
    root, parent, cache, cs = env
    out = tmp_path / "resumed"
    assert capture_model(parent, out, input_ids=IDS, tokens_per_window=8, cache=cache, max_new_layers=5) is None
    man = json.loads((out / MANIFEST).read_text())
    assert not man["complete"] and len(man["layers"]) == 5
    with pytest.raises(CaptureError, match=r"resumed/manifest\.json: capture incomplete \(5 layers\)"):
        load_capture_set(out)
    stamps = {n: (out / e["file"]).stat().st_mtime_ns for n, e in man["layers"].items()}
    done = capture_model(parent, out, input_ids=IDS, tokens_per_window=8, cache=cache)
    assert done.manifest["layers"] == cs.manifest["layers"]  # same digests as the one-shot capture
    assert {n: (out / man["layers"][n]["file"]).stat().st_mtime_ns for n in stamps} == stamps


def test_tampered_capture_is_refused(env, tmp_path):
    root, parent, cache, cs = env
    bad = tmp_path / "bad"
    shutil.copytree(cs.dir, bad)
    f = bad / "model.layers.1.mlp.up_proj.safetensors"
    from reference.model.checkpoint import load_safetensors_file

    t = load_safetensors_file(f)
    t["a"][0, 0] = t["a"][0, 0] + 1
    save_safetensors_atomic(t, f)
    with pytest.raises(
        CaptureError,
        match=r"bad/model\.layers\.1\.mlp\.up_proj\.safetensors: tensor 'a' digest "
        r"\w{12} does not match manifest \w{12}",
    ):
        load_capture_set(bad, model_dir=parent, cache=cache)
    # a manifest whose digest was edited
    shutil.rmtree(bad)
    shutil.copytree(cs.dir, bad)
    man = json.loads((bad / MANIFEST).read_text())
    man["layers"]["model.layers.0.self_attn.v_proj"]["digests"]["scale_a"] = "0" * 64
    (bad / MANIFEST).write_text(json.dumps(man))
    with pytest.raises(
        CaptureError,
        match=r"v_proj\.safetensors: tensor 'scale_a' digest \w{12} does not match "
        r"manifest 000000000000",
    ):
        load_capture_set(bad)
    # truncated layer file
    shutil.rmtree(bad)
    shutil.copytree(cs.dir, bad)
    f = bad / "model.layers.0.mlp.gate_proj.safetensors"
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size - 10)
    with pytest.raises(CaptureError, match=r"gate_proj\.safetensors: truncated safetensors file"):
        load_capture_set(bad)


def test_capture_from_a_different_model(env, tmp_path):
    root, parent, cache, cs = env
    other = write_random_qwen3(tmp_path / "other", seed=6)
    with pytest.raises(
        CaptureError,
        match=r"manifest\.json: capture is from model \w{12}, but .*other has digest "
        r"\w{12} \(a different model\)",
    ):
        load_capture_set(cs.dir, model_dir=other, cache=cache)
    before = {p.name: p.stat().st_mtime_ns for p in cs.dir.iterdir()}
    with pytest.raises(CaptureError, match=r"manifest\.json: holds a capture of model \w{12}, not \w{12}"):
        capture_model(other, cs.dir, input_ids=IDS, tokens_per_window=8, cache=cache)
    with pytest.raises(
        CaptureError, match=r"setting 'positions' is \[0, 4, 9, 13, 18, 22, 27, 31\] there, \[0, 10, 21, 31\] now"
    ):
        capture_model(parent, cs.dir, input_ids=IDS, tokens_per_window=4, cache=cache)
    assert {p.name: p.stat().st_mtime_ns for p in cs.dir.iterdir()} == before  # nothing touched


def test_replay_refuses_a_different_checkpoint(env, tmp_path):
    root, parent, cache, cs = env
    cs2 = load_capture_set(cs.dir, model_dir=parent, cache=cache)
    cs2.external["own"] = str(tmp_path / "other_own")
    from reference.model.compressed_tensors import build_w8a8_checkpoint

    other = write_random_qwen3(tmp_path / "other", seed=8)
    build_w8a8_checkpoint(other, tmp_path / "other_own")
    with pytest.raises(
        CaptureError,
        match=r"checkpoint 'own' at .*other_own has digest \w{12}, "
        r"the capture was taken against \w{12}",
    ):
        next(iter_layer_operands(cs2, "own"))


def test_hf_engine_with_pre_hooks_agrees(env, tmp_path):
    """``engine='hf'`` (transformers model + forward pre-hooks) in float64
    captures the same bf16 rows as the f64 engine up to rare few-ulp
    differences from transformers' float32 RMSNorm / softmax internals
    (measured on this model: 37 of 105 k elements differ, at most 4 ulp)."""
    pytest.importorskip("transformers")
    root, parent, cache, cs = env
    hf = capture_model(
        parent, tmp_path / "hf", input_ids=IDS, tokens_per_window=8, cache=cache, engine="hf", dtype=torch.float64
    )
    assert hf.manifest["settings"]["engine"] == "hf"
    assert hf.manifest["checkpoints"] == cs.manifest["checkpoints"]
    same = total = 0
    for name in cs.layer_names():
        x1, x2 = cs.load_layer(name)["x"], hf.load_layer(name)["x"]
        from reference.bits import spacing_distance

        dist = spacing_distance(x1, x2)
        assert int(dist.max()) <= 8, name
        same += int((dist == 0).sum())
        total += dist.numel()
    assert same / total > 0.999


@pytest.mark.parametrize(
    "device, why",
    [
        ("nonsense", "not a valid device"),
        ("meta", "unsupported device type 'meta'"),
        ("cpu:1", "there is one CPU device"),
        pytest.param(
            "cuda", "CUDA requested but", marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
        ),
    ],
)
def test_a_bad_capture_device_is_refused_in_one_line_before_any_work(env, tmp_path, device, why):
    root, parent, cache, cs = env
    with pytest.raises(CaptureError) as e:
        capture_model(parent, tmp_path / "c", input_ids=IDS, tokens_per_window=8, cache=cache, device=device)
    assert str(e.value).startswith(f"device {device!r}: ") and why in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "c").exists()


def test_the_forward_on_the_cpu_device_is_the_default_capture(env, tmp_path):
    root, parent, cache, cs = env
    got = capture_model(parent, tmp_path / "cpu", input_ids=IDS, tokens_per_window=8, cache=cache, device="cpu")
    assert got.manifest == cs.manifest  # nothing records the device


def _small_paper_model(root):
    """The paper-scale script's ``--small`` shape (hidden 256, 2 blocks), random, with 4 windows of 128 tokens."""
    shape = dict(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=2)
    parent = write_random_qwen3(root / "small", seed=0, **shape)
    ids = torch.randint(0, 4096, (4, 128), generator=torch.Generator().manual_seed(0))
    return parent, ids, 16


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("model", ["tiny", "small"])
def test_a_capture_on_the_gpu_is_the_cpu_capture(env, tmp_path, model):
    """Every layer digest (x, a, scale_a), weight digest and accumulator statistic agrees: the float64
    forward on the GPU rounds to the CPU's bf16 rows (module docstring: a flip needs a value within ~1e-16
    relative of a bf16 rounding boundary); the derived checkpoints, built on the GPU into a cache of
    their own, are the CPU's files byte for byte."""
    root, parent, cache, cs = env
    ids, per_window = IDS, 8
    if model == "small":
        parent, ids, per_window = _small_paper_model(tmp_path)
        cs = capture_model(parent, tmp_path / "cpu", input_ids=ids, tokens_per_window=per_window, cache=cache)
    gcache = tmp_path / "gpu-cache"
    gpu = capture_model(
        parent, tmp_path / "gpu", input_ids=ids, tokens_per_window=per_window, cache=gcache, device="cuda"
    )
    assert gpu.manifest["layers"] == cs.manifest["layers"] and len(cs.manifest["layers"]) == 14
    assert gpu.manifest == cs.manifest
    for name in cs.layer_names():
        assert torch.equal(gpu.load_layer(name)["x"].view(torch.int16), cs.load_layer(name)["x"].view(torch.int16))
    for kind in KINDS:
        a, b = derived_checkpoint(parent, kind, cache).dir, derived_checkpoint(parent, kind, gcache).dir
        assert a != b and sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
        for f in a.iterdir():
            assert f.read_bytes() == (b / f.name).read_bytes(), (kind, f.name)


def test_a_bad_checkpoint_device_is_refused_in_one_line(env, tmp_path):
    root, parent, cache, cs = env
    with pytest.raises(CheckpointError, match=r"^device 'cpu:1': there is one CPU device; use 'cpu'$"):
        derived_checkpoint(parent, "own", tmp_path / "c", device="cpu:1")


def test_cached_capture_of_the_default_model_is_the_shipped_capture_and_built_once(tmp_path, monkeypatch):
    """``check --model``, ``sweep --model`` and the study share ``cached_capture``: the default settings of the
    default model rebuild the shipped captures (same digests, layer by layer); a second call builds nothing."""
    import reference.model.capture as capture
    from reference.model.assets import default_model_dir
    from reference.model.capture import cached_capture, default_capture_set

    cs = cached_capture(default_model_dir(), cache=tmp_path, store_raw=False)
    shipped = default_capture_set()
    assert cs.dir.parent == tmp_path / "captures" and cs.dir.name.endswith("-own-w4x16")

    def qdigests(man):  # the quantized activations (the shipped set also stores the raw x)
        return {n: (e["digests"]["a"], e["digests"]["scale_a"], e["weights"]) for n, e in man["layers"].items()}

    assert len(cs.manifest["layers"]) == 28 and qdigests(cs.manifest) == qdigests(shipped.manifest)
    monkeypatch.setattr(capture, "forward_f64", lambda *a, **k: pytest.fail("rebuilt a cached capture"))
    again = cached_capture(default_model_dir(), cache=tmp_path, store_raw=False)
    assert again.dir == cs.dir and again.manifest["layers"] == cs.manifest["layers"]
    with pytest.raises(CaptureError, match="not a model directory"):
        cached_capture(tmp_path / "nope", cache=tmp_path)
