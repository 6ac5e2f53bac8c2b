"""artifact schema validation at load, whitespace-only prompts (detllm).

An artifact must be exactly what ``detllm prepare`` writes: the tensor set,
dtypes and shapes implied by its config (``detllm.artifact.expected_tensors``).
A re-sealed artifact (tensors_sha256 and digest recomputed, so the digest
checks pass) with a removed / retyped / reshaped / added tensor must fail at
load with one CheckpointError line naming the artifact path, the tensor and
expected vs found -- not with a KeyError or a kernel shape error in the forward.
"""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from detllm import artifact as A
from detllm import cli
from detllm.prepare import SHIPPED_DIR, PrepareOptions, make_tiny_model, prepare
from reference.errors import CheckpointError
from reference.fileio import file_sha256

# TINY_QWEN3 (detllm.prepare): vocab 512, hidden 256, 2 layers, 4 heads, 2 kv heads,
# head_dim 64, intermediate 1536, max_position 256.
V, H, L, NH, NKV, HD, I, P = 512, 256, 2, 4, 2, 64, 1536, 256
PER_LAYER = 20  # attn_norm.g, qkv.{w,m,k}, q_norm.g, k_norm.g, k_cache.{m,k}, score.{m,k},
#                  o.{w,m,k}, mlp_norm.g, gate_up.{w,m,k}, down.{w,m,k}
GLOBAL = 7  # embed, final_norm.g, lm_head.{w,m,k}, rope.{cos,sin}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("fix_detllm")
    md = make_tiny_model(d / "model", seed=3)
    art = prepare(md, d / "art", PrepareOptions(calib_windows=2, calib_len=16, calib_source="random"))
    yield art
    torch.set_num_threads(prev)


def _resealed(art, dst, edit):
    """Copy of ``art`` at ``dst`` with ``edit(tensors)`` applied, sha256 and digest re-sealed."""
    dst.mkdir()
    ts = load_file(str(art.path / A.TENSORS_FILE))
    edit(ts)
    save_file(ts, str(dst / A.TENSORS_FILE))
    cfg = json.loads((art.path / A.CONFIG_FILE).read_text())
    cfg["tensors_sha256"] = file_sha256(dst / A.TENSORS_FILE)
    cfg["digest"] = A.artifact_digest(cfg, cfg["tensors_sha256"])
    (dst / A.CONFIG_FILE).write_text(json.dumps(cfg))
    return dst


def _load_error(d) -> str:
    with pytest.raises(CheckpointError) as ei:
        A.load_artifact(d)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def test_schema_of_tiny_config_is_hand_derived(tiny):
    sch = A.expected_tensors(tiny.config)
    assert len(sch) == PER_LAYER * L + GLOBAL == 47
    assert sch["embed"] == (torch.int32, (V, H))
    assert sch["layers.1.qkv.w"] == (torch.int8, ((NH + 2 * NKV) * HD, H)) == (torch.int8, (512, 256))
    assert sch["layers.0.qkv.m"] == (torch.int64, (512,))
    assert sch["layers.0.o.w"] == (torch.int8, (H, NH * HD))
    assert sch["layers.0.gate_up.k"] == (torch.int64, (2 * I,))
    assert sch["layers.0.down.w"] == (torch.int8, (H, I))
    assert sch["layers.0.q_norm.g"] == (torch.int32, (NH, HD))
    assert sch["layers.0.k_norm.g"] == (torch.int32, (NKV, HD))
    assert sch["layers.1.score.m"] == (torch.int64, (NKV,))
    assert sch["lm_head.w"] == (torch.int8, (V, H))
    assert sch["rope.sin"] == (torch.int16, (P, HD))


def test_fresh_prepare_matches_schema_exactly(tiny):
    got = {k: (v.dtype, tuple(v.shape)) for k, v in tiny.tensors.items()}
    assert got == A.expected_tensors(tiny.config)
    again = A.load_artifact(tiny.path)  # passes the load-time check
    assert again.digest == tiny.digest


def test_shipped_default_artifact_matches_schema():
    if not A.is_artifact_dir(SHIPPED_DIR):
        pytest.skip("shipped artifact not present")
    art = A.load_artifact(SHIPPED_DIR)
    got = {k: (v.dtype, tuple(v.shape)) for k, v in art.tensors.items()}
    sch = A.expected_tensors(art.config)
    assert got == sch
    m = art.config["model"]
    assert len(sch) == PER_LAYER * m["layers"] + GLOBAL
    if (m["hidden"], m["layers"], m["heads"], m["kv_heads"], m["vocab"]) == (384, 4, 6, 2, 4096):
        assert len(sch) == 87 and sch["layers.3.qkv.w"] == (torch.int8, (640, 384))
        assert sch["embed"] == (torch.int32, (4096, 384))


def test_removed_tensor(tiny, tmp_path):
    d = _resealed(tiny, tmp_path / "a", lambda ts: ts.pop("embed"))
    assert _load_error(d) == f"artifact {d}: tensor 'embed' is missing (expected int32 [{V}, {H}])"


def test_removed_tensors_counts_the_rest(tiny, tmp_path):
    def edit(ts):
        for k in ("layers.1.o.w", "layers.1.o.m", "layers.1.o.k"):
            ts.pop(k)

    d = _resealed(tiny, tmp_path / "a", edit)
    assert _load_error(d) == (
        f"artifact {d}: tensor 'layers.1.o.w' is missing (expected int8 [{H}, {NH * HD}]; 2 more missing)"
    )


def test_retyped_tensor(tiny, tmp_path):
    def edit(ts):
        ts["layers.0.down.w"] = ts["layers.0.down.w"].to(torch.int16)

    d = _resealed(tiny, tmp_path / "a", edit)
    assert _load_error(d) == f"artifact {d}: tensor 'layers.0.down.w' has dtype int16, expected int8"


def test_reshaped_tensor(tiny, tmp_path):
    def edit(ts):
        ts["layers.1.down.w"] = ts["layers.1.down.w"][:11].contiguous()

    d = _resealed(tiny, tmp_path / "a", edit)
    assert _load_error(d) == (f"artifact {d}: tensor 'layers.1.down.w' has shape [11, {I}], expected [{H}, {I}]")


def test_added_tensor(tiny, tmp_path):
    def edit(ts):
        ts["layers.0.extra.w"] = torch.zeros(3, 4, dtype=torch.int8)

    d = _resealed(tiny, tmp_path / "a", edit)
    assert _load_error(d) == (
        f"artifact {d}: unexpected tensor 'layers.0.extra.w' (int8 [3, 4]); "
        "an artifact holds exactly the tensors `detllm prepare` writes"
    )


def test_config_layers_entry_dropped(tiny, tmp_path):
    d = tmp_path / "a"
    d.mkdir()
    (d / A.TENSORS_FILE).write_bytes((tiny.path / A.TENSORS_FILE).read_bytes())
    cfg = json.loads((tiny.path / A.CONFIG_FILE).read_text())
    cfg["layers"] = cfg["layers"][:1]
    cfg["digest"] = A.artifact_digest(cfg, cfg["tensors_sha256"])
    (d / A.CONFIG_FILE).write_text(json.dumps(cfg))
    assert _load_error(d) == f"artifact {d}: config field 'layers' has 1 entries, expected {L} (model.layers)"


def test_save_refuses_schema_mismatch(tiny, tmp_path):
    ts = dict(tiny.tensors)
    ts.pop("rope.cos")
    out = tmp_path / "x"
    with pytest.raises(CheckpointError) as ei:
        A.save_artifact(out, tiny.config, ts)
    assert str(ei.value) == f"artifact {out}: tensor 'rope.cos' is missing (expected int16 [{P}, {HD}])"
    assert not (out / A.TENSORS_FILE).exists()


def test_cli_generate_on_tampered_artifact_is_one_line(tiny, tmp_path, capsys):
    d = _resealed(tiny, tmp_path / "a", lambda ts: ts.pop("embed"))
    rc = cli.main(["generate", "--artifact", str(d), "--ids", "1,2,3", "-n", "2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"detllm: error: artifact {d}: tensor 'embed' is missing (expected int32 [{V}, {H}])\n"


@pytest.mark.parametrize("prompts,idx", [(["   "], 0), (["\t \n"], 0), (["Shall I", " "], 1)])
def test_cli_rejects_whitespace_only_prompt(tiny, capsys, prompts, idx):
    argv = ["generate", "--artifact", str(tiny.path), "-n", "2"]
    for p in prompts:
        argv += ["--prompt", p]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"detllm: error: prompt {idx} is whitespace only (need at least one non-space character)\n"
