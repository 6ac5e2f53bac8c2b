"""Checkpoint I/O and the compressed-tensors W8A8 format."""

import json
import shutil

import pytest
import torch

from reference.errors import CheckpointError
from reference.model.checkpoint import (
    is_qwen3_dir,
    linear_names,
    load_qwen3_state,
    save_safetensors_atomic,
    state_digest,
    write_json_atomic,
    write_random_qwen3,
)
from reference.model.compressed_tensors import build_w8a8_checkpoint, read_w8a8_checkpoint, w8a8_quantization_config
from reference.quantize import quantize_weight_per_channel


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    return write_random_qwen3(tmp_path_factory.mktemp("parent") / "m", seed=1)


@pytest.fixture(scope="module")
def committed(parent, tmp_path_factory):
    return build_w8a8_checkpoint(parent, tmp_path_factory.mktemp("w8a8") / "own")


def test_single_and_sharded_load_identically(parent, tmp_path):
    sharded = write_random_qwen3(tmp_path / "sharded", seed=1, shards=3)
    assert len(list(sharded.glob("model-*-of-00003.safetensors"))) == 3
    c1, s1 = load_qwen3_state(parent)
    c2, s2 = load_qwen3_state(sharded)
    assert sorted(s1) == sorted(s2)
    assert state_digest(s1) == state_digest(s2)
    # 2 blocks x (7 linears + 4 norms) + embedding + final norm (tied head)
    assert len(s1) == 2 * 11 + 2
    assert is_qwen3_dir(parent) and is_qwen3_dir(sharded)


def test_not_a_qwen3_dir(parent, tmp_path):
    d = tmp_path / "llama"
    shutil.copytree(parent, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(model_type="llama", architectures=["LlamaForCausalLM"])
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"llama/config\.json: not a Qwen3 checkpoint \(model_type='llama'"):
        load_qwen3_state(d)
    assert not is_qwen3_dir(d)
    with pytest.raises(CheckpointError, match=r"empty/config\.json: missing"):
        (tmp_path / "empty").mkdir()
        load_qwen3_state(tmp_path / "empty")
    assert not is_qwen3_dir(tmp_path / "nowhere")


def test_truncated_safetensors_names_file_and_sizes(parent, tmp_path):
    d = tmp_path / "trunc"
    shutil.copytree(parent, d)
    f = d / "model.safetensors"
    size = f.stat().st_size
    with open(f, "r+b") as fh:
        fh.truncate(size - 1000)
    with pytest.raises(
        CheckpointError,
        match=rf"trunc/model\.safetensors: truncated safetensors file \({size - 1000} bytes, "
        rf"header declares {size}\)",
    ):
        load_qwen3_state(d)
    with open(f, "r+b") as fh:
        fh.truncate(5)  # not even the 8-byte header length
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a readable safetensors file"):
        load_qwen3_state(d)


def test_missing_tensor_and_missing_shard(parent, tmp_path):
    _, state = load_qwen3_state(parent)
    d = tmp_path / "missing"
    shutil.copytree(parent, d)
    del state["model.layers.1.mlp.up_proj.weight"]
    save_safetensors_atomic(state, d / "model.safetensors")
    with pytest.raises(
        CheckpointError,
        match=r"missing/model\.safetensors: missing tensor "
        r"'model\.layers\.1\.mlp\.up_proj\.weight'",
    ):
        load_qwen3_state(d)
    sh = write_random_qwen3(tmp_path / "sh", seed=1, shards=2)
    (sh / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002\.safetensors: safetensors file missing"):
        load_qwen3_state(sh)


def test_wrong_shape_is_named(parent, tmp_path):
    d = tmp_path / "shape"
    shutil.copytree(parent, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 1024
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        CheckpointError,
        match=r"tensor 'model\.layers\.0\.mlp\.gate_proj\.weight' has shape "
        r"\[1536, 256\], config implies \[1024, 256\]",
    ):
        load_qwen3_state(d)


def test_w8a8_layout_and_config(parent, committed):
    cfg = json.loads((committed.dir / "config.json").read_text())
    qc = cfg["quantization_config"]
    assert qc == w8a8_quantization_config()
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "int-quantized"
    assert qc["ignore"] == ["lm_head"]
    g = qc["config_groups"]["group_0"]
    assert g["targets"] == ["Linear"]
    assert {k: g["weights"][k] for k in ("num_bits", "type", "symmetric", "strategy", "dynamic")} == {
        "num_bits": 8,
        "type": "int",
        "symmetric": True,
        "strategy": "channel",
        "dynamic": False,
    }
    assert {k: g["input_activations"][k] for k in ("num_bits", "type", "symmetric", "strategy", "dynamic")} == {
        "num_bits": 8,
        "type": "int",
        "symmetric": True,
        "strategy": "token",
        "dynamic": True,
    }
    assert cfg["model_type"] == "qwen3" and cfg["int8conf"]["scale_rule"] == "own"
    _, raw = load_qwen3_state(committed.dir)
    _, pstate = load_qwen3_state(parent)
    assert cfg["int8conf"]["parent_digest"] == state_digest(pstate)
    for name in linear_names(cfg):
        q, s = quantize_weight_per_channel(pstate[f"{name}.weight"])
        assert raw[f"{name}.weight"].dtype == torch.int8
        assert raw[f"{name}.weight_scale"].dtype == torch.bfloat16
        assert raw[f"{name}.weight_scale"].shape == (q.shape[0], 1)
        assert torch.equal(raw[f"{name}.weight"], q) and torch.equal(raw[f"{name}.weight_scale"], s)
    # non-linear tensors pass through bit for bit; no input_scale (dynamic activations)
    assert torch.equal(raw["model.embed_tokens.weight"], pstate["model.embed_tokens.weight"])
    assert not any(k.endswith("input_scale") for k in raw)
    assert len(committed.layer_names()) == 14
    assert committed.scale_b("model.layers.0.self_attn.q_proj").dtype == torch.float32


def test_reader_accepts_other_tool_layouts(committed, tmp_path):
    """fp32 [N] scales, an all-zero weight_zero_point, the old
    ``compression_config`` key and a per-group format (as older / newer
    llm-compressor releases write) load to the same operands."""
    _, raw = load_qwen3_state(committed.dir)
    other = {}
    for k, v in raw.items():
        if k.endswith(".weight_scale"):
            other[k] = v.to(torch.float32).reshape(-1)
            other[k.replace("weight_scale", "weight_zero_point")] = torch.zeros(v.shape, dtype=torch.int8)
        else:
            other[k] = v
    d = tmp_path / "other"
    d.mkdir()
    cfg = json.loads((committed.dir / "config.json").read_text())
    qc = cfg.pop("quantization_config")
    del cfg["int8conf"]
    qc["config_groups"]["group_0"]["format"] = "int-quantized"
    cfg["compression_config"] = qc
    write_json_atomic(cfg, d / "config.json")
    save_safetensors_atomic(other, d / "model.safetensors")
    ck = read_w8a8_checkpoint(d)
    assert ck.meta == {}
    for name in committed.layer_names():
        assert torch.equal(ck.weight(name), committed.weight(name))
        assert torch.equal(ck.scale_b(name), committed.scale_b(name))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda qc: qc.update(quant_method="fp8"), r"quant_method='fp8' \(expected 'compressed-tensors'\)"),
        (
            lambda qc: qc["config_groups"]["group_0"]["weights"].update(strategy="tensor"),
            r"config_groups\.group_0\.weights\.strategy='tensor'",
        ),
        (lambda qc: qc.update(format="pack-quantized"), r"format='pack-quantized'"),
    ],
)
def test_reader_rejects_unsupported_schemes(committed, tmp_path, edit, message):
    d = tmp_path / "bad"
    shutil.copytree(committed.dir, d)
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg["quantization_config"])
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"bad/config\.json: quantization_config.*" + message):
        read_w8a8_checkpoint(d)


def test_reader_rejects_float_parent_and_bad_zero_point(parent, committed, tmp_path):
    with pytest.raises(CheckpointError, match=r"no quantization_config"):
        read_w8a8_checkpoint(parent)
    _, raw = load_qwen3_state(committed.dir)
    zp = torch.zeros((256, 1), dtype=torch.int8)
    zp[3, 0] = 1
    raw["model.layers.0.self_attn.q_proj.weight_zero_point"] = zp
    d = tmp_path / "zp"
    shutil.copytree(committed.dir, d)
    save_safetensors_atomic(raw, d / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"q_proj\.weight_zero_point is non-zero"):
        read_w8a8_checkpoint(d)


def test_sharded_w8a8_reads_like_single(committed, tmp_path):
    _, raw = load_qwen3_state(committed.dir)
    d = tmp_path / "sharded_w8a8"
    d.mkdir()
    shutil.copy(committed.dir / "config.json", d / "config.json")
    names = sorted(raw)
    wm = {}
    for i, part in enumerate((names[::2], names[1::2])):
        fname = f"model-0000{i + 1}-of-00002.safetensors"
        save_safetensors_atomic({n: raw[n] for n in part}, d / fname)
        wm.update({n: fname for n in part})
    write_json_atomic({"metadata": {}, "weight_map": wm}, d / "model.safetensors.index.json")
    ck = read_w8a8_checkpoint(d)
    assert ck.digest == committed.digest and ck.layer_names() == committed.layer_names()


def test_a_non_finite_weight_is_named_by_its_tensor():
    """New-user pass 2026-12-01e: the error said only "w has 1 non-finite value(s)"."""
    from reference.errors import OperandError
    from reference.model.compressed_tensors import quantize_state_w8a8

    w = torch.ones((4, 8), dtype=torch.bfloat16)
    w[3, 5] = float("nan")
    state = {"model.layers.0.self_attn.q_proj.weight": w}
    with pytest.raises(
        OperandError,
        match=r"^tensor model\.layers\.0\.self_attn\.q_proj\.weight: "
        r"w has 1 non-finite value\(s\) \(first at \(3, 5\)\)",
    ):
        quantize_state_w8a8({"num_hidden_layers": 1}, state)


def test_a_non_finite_norm_weight_is_refused_at_load_naming_file_and_tensor(tmp_path):
    """New-user pass 2026-12-01e: a NaN in input_layernorm passed the gate and failed
    later as "x has 64 non-finite value(s)", naming no tensor."""
    import shutil

    from safetensors.torch import load_file, save_file

    from reference.errors import CheckpointError
    from reference.model.assets import default_model_dir
    from reference.model.checkpoint import load_qwen3_state

    d = tmp_path / "m"
    shutil.copytree(default_model_dir(), d)
    f = next(d.glob("*.safetensors"))
    state = load_file(f)
    name = "model.layers.0.input_layernorm.weight"
    state[name][7] = float("inf")
    save_file(state, f)
    with pytest.raises(
        CheckpointError,
        match=rf"{f}: tensor '{name}' has 1 non-finite value\(s\) "
        r"\(first at \(7,\)\)",
    ):
        load_qwen3_state(d)
