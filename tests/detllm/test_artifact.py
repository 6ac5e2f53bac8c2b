"""detllm artifact + bad-input tests.

The artifact must hold integer tensors only (asserted on write and on load),
carry a digest that load verifies, and every user error must be a one-line
Int8confError.
"""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from detllm import artifact as A
from detllm import engine as E
from detllm import generate as G
from detllm.prepare import PrepareOptions, _cfg_dims, _float_state, float_forward, make_tiny_model, prepare
from reference.errors import CheckpointError, Int8confError, OperandError
from reference.fileio import file_sha256
from reference.model.checkpoint import load_qwen3_state


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("det_art")
    md = make_tiny_model(d / "model", seed=1)
    art = prepare(md, d / "art", PrepareOptions(calib_windows=4, calib_len=32, calib_source="random"))
    yield md, art
    torch.set_num_threads(prev)


def _one_line(exc) -> bool:
    return "\n" not in str(exc) and len(str(exc)) > 10


def test_artifact_files_hold_integer_tensors_only(tiny):
    _, art = tiny
    path = art.path / A.TENSORS_FILE
    with safe_open(str(path), "pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes <= {"I8", "I16", "I32", "I64"}, dtypes
    assert "I8" in dtypes  # int8 weights are there
    cfg = json.loads((art.path / A.CONFIG_FILE).read_text())
    assert cfg["digest"] == art.digest and len(art.digest) == 64
    # every shift of every layer is in the config
    assert {"attn_norm_shift", "q_exp", "k_exp", "gate_exp", "up_exp"} <= set(cfg["layers"][0])
    assert {"resid_exp", "logit_exp", "qk_exp", "score_exp"} <= set(cfg["units"])


def test_digest_is_recomputable_and_reload_matches(tiny):
    _, art = tiny
    again = A.load_artifact(art.path, expect_digest=art.digest[:12])
    assert again.digest == art.digest
    sha = file_sha256(art.path / A.TENSORS_FILE)
    assert A.artifact_digest(again.config, sha) == art.digest
    for k, v in art.tensors.items():
        assert torch.equal(v, again.tensors[k]), k


def test_save_refuses_float_tensor(tmp_path):
    with pytest.raises(CheckpointError) as ei:
        A.save_artifact(
            tmp_path / "x",
            {"model": {}},
            {"w": torch.zeros(2, dtype=torch.int8), "s": torch.ones(2, dtype=torch.float32)},
        )
    assert "'s'" in str(ei.value) and "float32" in str(ei.value) and _one_line(ei.value)
    assert not (tmp_path / "x" / A.TENSORS_FILE).exists()


def _copy(art, dst):
    dst.mkdir()
    for f in (A.TENSORS_FILE, A.CONFIG_FILE):
        (dst / f).write_bytes((art.path / f).read_bytes())
    return dst


def test_load_rejects_planted_float_tensor_even_with_matching_digest(tiny, tmp_path):
    _, art = tiny
    d = _copy(art, tmp_path / "a")
    ts = load_file(str(d / A.TENSORS_FILE))
    ts["layers.0.qkv.m"] = ts["layers.0.qkv.m"].to(torch.float32)
    save_file(ts, str(d / A.TENSORS_FILE))
    cfg = json.loads((d / A.CONFIG_FILE).read_text())
    cfg["tensors_sha256"] = file_sha256(d / A.TENSORS_FILE)
    cfg["digest"] = A.artifact_digest(cfg, cfg["tensors_sha256"])  # attacker fixes the digest too
    (d / A.CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as ei:
        A.load_artifact(d)
    assert "layers.0.qkv.m" in str(ei.value) and "float32" in str(ei.value) and _one_line(ei.value)


def test_load_rejects_wrong_digest_and_tampering(tiny, tmp_path):
    _, art = tiny
    d = _copy(art, tmp_path / "b")
    cfg = json.loads((d / A.CONFIG_FILE).read_text())
    cfg["units"]["logit_exp"] += 1  # edited shift, digest kept
    (d / A.CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="digest") as ei:
        A.load_artifact(d)
    assert _one_line(ei.value)
    d2 = _copy(art, tmp_path / "c")
    raw = bytearray((d2 / A.TENSORS_FILE).read_bytes())
    raw[-1] ^= 1  # flipped weight bit
    (d2 / A.TENSORS_FILE).write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="sha256"):
        A.load_artifact(d2)
    with pytest.raises(CheckpointError, match="not the expected"):
        A.load_artifact(art.path, expect_digest="0" * 12)
    with pytest.raises(CheckpointError, match="missing"):
        A.load_artifact(tmp_path / "nowhere")


def test_bad_prompts_give_one_line_errors(tiny):
    _, art = tiny
    eng = E.load_engine(art, guard=False)
    ctx = art.config["model"]["max_position"]
    cases = [
        ([[]], "empty"),
        ([[1, 2, 512]], "out of range"),
        ([[-1, 3]], "out of range"),
        ([list(range(5)) * (ctx // 5 + 1)], "exceed the context"),
        ([], "non-empty"),
    ]
    for prompts, needle in cases:
        with pytest.raises(OperandError) as ei:
            G.generate(eng, prompts, 2)
        assert needle in str(ei.value) and _one_line(ei.value), (prompts, str(ei.value))
    # context: prompt fits but prompt + new tokens do not
    with pytest.raises(OperandError, match="exceed the context"):
        G.generate(eng, [[1] * (ctx - 2)], 4)
    with pytest.raises(OperandError, match="exceeds the model"):
        E.new_cache(eng, 1, ctx + 1)
    # forward-level checks too
    cache = E.new_cache(eng, 1, 4)
    with pytest.raises(OperandError, match="out of range"):
        E.forward(eng, torch.tensor([[7, 600]]), [2], cache)
    with pytest.raises(OperandError, match="exceed the context"):
        E.forward(eng, torch.tensor([[1, 2, 3, 4, 5]]), [5], cache)


def test_integer_logits_track_the_float_model(tiny):
    """Golden: int32 logits * 2^-logit_exp vs the fp64 reference forward
    (itself checked against transformers to 1e-6). Frozen bounds for the
    tiny random model: relative L2 error <= 8 %, top-1 agreement >= 80 %."""
    md, art = tiny
    cfg, state = load_qwen3_state(md)
    dims = _cfg_dims(cfg)
    st = _float_state(state, dims)
    ids = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(5))
    ref = float_forward(dims, st, ids)
    import transformers

    with torch.no_grad():
        hf = transformers.Qwen3ForCausalLM.from_pretrained(str(md), dtype=torch.float64)(ids).logits
    assert float((hf - ref).abs().max()) < 1e-6
    eng = E.load_engine(art, guard=False)
    lg = E.forward(eng, ids, [24, 24], E.new_cache(eng, 2, 24))
    assert lg.dtype == torch.int32
    li = lg.double() * 2.0 ** -art.config["units"]["logit_exp"]
    rel = float((li - ref).norm() / ref.norm())
    agree = float((li.argmax(-1) == ref.argmax(-1)).double().mean())
    print(f"rel {rel:.4f} agree {agree:.3f}")
    assert rel <= 0.08, rel
    assert agree >= 0.80, agree


def test_cli_errors_are_one_line_exit_2(tiny, capsys):
    from detllm.cli import main

    _, art = tiny
    rc = main(["generate", "--artifact", str(art.path), "--ids", "1,2,999", "-n", "2", "--no-guard"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("detllm: error:") and "out of range" in err and "\n" not in err
    rc = main(["generate", "--artifact", str(art.path) + "_missing", "--ids", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "missing" in err and "\n" not in err
    assert isinstance(OperandError("x"), Int8confError)
