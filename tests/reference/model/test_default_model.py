"""The shipped default Qwen3 model: architecture, size, files, quality."""

import json
import math
import re
import shutil

import pytest
import torch
from safetensors import safe_open

from reference.errors import CheckpointError
from reference.model.assets import (
    MANIFEST_FILE,
    assets_dir,
    corpus_dir,
    default_model_dir,
    file_digest,
    verify_manifest,
)
from reference.model.corpus import eval_windows, load_corpus_split, prompts
from reference.model.tokenizer import load_tokenizer
from reference.model.train import model_nll

MODEL = default_model_dir()


@pytest.fixture(scope="module")
def cfg():
    return json.loads((MODEL / "config.json").read_text())


@pytest.fixture(scope="module")
def tensors():
    with safe_open(str(MODEL / "model.safetensors"), "pt") as f:
        return {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape())) for k in f.keys()}


@pytest.fixture(scope="module")
def model():
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM.from_pretrained(MODEL).eval()


def test_config_satisfies_architecture_constraints(cfg):
    assert cfg["model_type"] == "qwen3" and cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["num_hidden_layers"] >= 4
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]
    assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0
    assert cfg["head_dim"] == 64 and cfg["intermediate_size"] >= 1536
    assert cfg["tie_word_embeddings"] is True and cfg["vocab_size"] == 4096
    assert cfg["dtype"] == "bfloat16" and cfg["max_position_embeddings"] == 512


def test_safetensors_params_dtype_and_qk_norm(cfg, tensors):
    n = sum(math.prod(shape) for _, shape in tensors.values())
    assert n == 10_227_584 <= 12_000_000
    assert {dt for dt, _ in tensors.values()} == {"BF16"}
    assert "lm_head.weight" not in tensors  # tied to embed_tokens
    h, d = cfg["hidden_size"], cfg["head_dim"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        assert tensors[p + "self_attn.q_norm.weight"][1] == (d,)
        assert tensors[p + "self_attn.k_norm.weight"][1] == (d,)
        assert tensors[p + "self_attn.k_proj.weight"][1] == (cfg["num_key_value_heads"] * d, h)
        assert tensors[p + "mlp.down_proj.weight"][1] == (h, cfg["intermediate_size"])  # K = 1536 > 1032
    assert (MODEL / "model.safetensors").stat().st_size <= 24_000_000


def test_train_log_ties_model_to_shipped_tokenizer_and_corpus():
    log = json.loads((MODEL / "train_log.json").read_text())
    assert log["tokenizer_sha256"] == file_digest(MODEL / "tokenizer.json")
    assert log["corpus_sha256"] == file_digest(corpus_dir() / "corpus.json.xz")
    ev = log["heldout_eval"]
    assert ev["model_ppl"] < ev["unigram_ppl"] / 5
    assert log["parameters"] == 10_227_584


def test_heldout_perplexity_far_below_unigram_on_cpu(model):
    log = json.loads((MODEL / "train_log.json").read_text())
    w = eval_windows(load_tokenizer(), 2, 256)
    ppl = math.exp(model_nll(model, w, batch=2))
    assert ppl < log["heldout_eval"]["unigram_ppl"] / 5  # unigram baseline ~553
    assert 20 < ppl < 110  # GPU bf16 figure over all held-out windows: ~51


def test_generates_english_from_sonnet_18(model):
    tok = load_tokenizer()
    ids = torch.tensor([tok.encode(prompts()[0]).ids])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=30, do_sample=False, pad_token_id=0)
    text = tok.decode(out[0, ids.shape[1] :].tolist())
    vocab = set(re.findall(r"[a-z']+", " ".join(load_corpus_split()["train"].values()).lower()))
    words = re.findall(r"[a-z']+", text.lower())
    assert len(words) >= 10
    assert sum(w in vocab for w in words) / len(words) >= 0.9, text


def test_manifest_matches_shipped_files():
    recorded = verify_manifest()
    assert set(recorded) >= {
        "corpus/corpus.json.xz",
        "corpus/split.json",
        "corpus/prompts.json",
        "default_model/config.json",
        "default_model/model.safetensors",
        "default_model/tokenizer.json",
        "default_model/tokenizer_config.json",
        "default_model/generation_config.json",
        "default_model/train_log.json",
    }
    import hashlib

    blob = (MODEL / "model.safetensors").read_bytes()
    assert recorded["default_model/model.safetensors"] == hashlib.sha256(blob).hexdigest()


def test_manifest_detects_tampering_and_unrecorded_files(tmp_path):
    for sub in ("corpus", "default_model"):
        shutil.copytree(assets_dir() / sub, tmp_path / sub)
    shutil.copy(assets_dir() / MANIFEST_FILE, tmp_path / MANIFEST_FILE)
    verify_manifest(tmp_path)
    (tmp_path / "default_model" / "extra.json").write_text("{}")
    with pytest.raises(CheckpointError, match="extra.json: shipped but not recorded"):
        verify_manifest(tmp_path)
    (tmp_path / "default_model" / "extra.json").unlink()
    cfg = tmp_path / "default_model" / "config.json"
    cfg.write_bytes(cfg.read_bytes().replace(b'"num_hidden_layers": 4', b'"num_hidden_layers": 5'))
    with pytest.raises(CheckpointError, match="config.json: sha256 does not match"):
        verify_manifest(tmp_path)
