"""Acceptance: the default model's derived checkpoints and shipped captures
rebuild bit for bit from the parents.

Skipped only while the shipped captures do not exist yet (before the default
model lands); once ``reference/model/assets/captures/manifest.json`` exists every
test here runs.
"""

import pytest
import torch

from reference.model.capture import capture_model, default_capture_set, default_captures_dir, iter_layer_operands

pytestmark = pytest.mark.skipif(
    not (default_captures_dir() / "manifest.json").is_file(), reason="default model captures not built yet"
)


@pytest.fixture(scope="module")
def shipped():
    return default_capture_set()


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("int8conf_cache")


def test_shipped_captures_cover_every_layer(shipped):
    from reference.model.artifacts import default_parent_dir, parent_digest
    from reference.model.checkpoint import linear_names, read_config

    cfg = read_config(default_parent_dir())
    assert shipped.model_digest == parent_digest(default_parent_dir())
    assert shipped.layer_names() == linear_names(cfg)
    assert len(shipped.layer_names()) == 7 * cfg["num_hidden_layers"]
    assert shipped.manifest["model"]["dir"] == "<default>"


def test_w8a8_and_pow2_rebuild_from_parents(shipped, fresh_cache):
    from reference.model.artifacts import build_all, default_parent_dir
    from reference.model.pow2 import reconstruction_gate

    built = build_all(default_parent_dir(), cache=fresh_cache)
    assert {k: ck.digest for k, ck in built.items()} == {
        k: rec["digest"] for k, rec in shipped.manifest["checkpoints"].items()
    }
    gate = reconstruction_gate(default_parent_dir(), built["own"].dir)
    assert gate["passed"] and gate["state_digest"] == shipped.manifest["checkpoints"]["own"]["digest"]


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
        ),
    ],
)
def test_captures_rebuild_bit_for_bit(shipped, fresh_cache, tmp_path, device):
    """On the GPU too: its float64 forward and its derived checkpoints (a cache of its own) give the shipped bits."""
    from reference.model.artifacts import default_parent_dir

    st = shipped.manifest["settings"]
    rebuilt = capture_model(
        default_parent_dir(),
        tmp_path / "cap",
        windows=st["windows"],
        window_len=st["window_len"],
        tokens_per_window=len(st["positions"]),
        cache=fresh_cache if device == "cpu" else tmp_path / "cache",
        store_raw=st["store_raw"],
        device=device,
    )
    assert rebuilt.manifest["settings"] == st
    assert rebuilt.manifest["checkpoints"] == shipped.manifest["checkpoints"]
    assert rebuilt.manifest["layers"] == shipped.manifest["layers"]
    assert rebuilt.manifest["summary"] == shipped.manifest["summary"]


@pytest.mark.parametrize("mode", ["own", "pow2"])
def test_replay_every_layer(shipped, fresh_cache, mode):
    from reference.model.capture import load_capture_set

    cs = load_capture_set(shipped.dir, cache=fresh_cache)
    ops = list(iter_layer_operands(cs, mode))
    assert [o.name for o in ops] == shipped.layer_names()
    kind = "own" if mode == "own" else "pow2-nearest"
    for o in ops:
        e = shipped.manifest["layers"][o.name]
        d = o.digests()
        assert (d["a"], d["scale_a"], d["b"], d["scale_b"]) == (
            e["digests"]["a"],
            e["digests"]["scale_a"],
            e["weights"][kind]["b"],
            e["weights"][kind]["scale_b"],
        )
        if mode == "pow2":
            m, _ = torch.frexp(o.scale_b.double())
            assert torch.all(m == 0.5)
