"""The fused GPU decode path (detllm.fast) gives the reference engine's bits.

CPU: a small random model under Triton's interpreter, a batch of two prompts
of different lengths (padding rows), prefill in one chunk and in chunks:
chained logits and token hashes equal ``detllm.generate.generate``'s.
CUDA (marked): the shipped default model's pinned hashes through the fused
kernels with the decode step captured in a CUDA graph, alone, in a batch of 8
and with token-by-token prefill.
"""

import pytest
import torch
from shipped_pins import DEFAULT_GENERATED, DEFAULT_LOGITS, DEFAULT_TOKENS, shipped_sonnet

from detllm import engine as E
from detllm import fast as F
from detllm import generate as G


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from detllm.prepare import PrepareOptions, make_tiny_model, prepare

    d = tmp_path_factory.mktemp("fast")
    md = make_tiny_model(
        d / "model",
        seed=3,
        hidden_size=64,
        intermediate_size=96,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=96,
        num_hidden_layers=1,
        max_position_embeddings=32,
    )
    art = prepare(md, d / "art", PrepareOptions(calib_windows=2, calib_len=16, calib_source="random"))
    return E.load_engine(art, guard=False)


def test_fast_path_equals_reference_engine_with_padding_and_chunked_prefill(small):
    prompts = [[5, 17, 42, 3, 88], [9, 2]]
    ref = G.generate(small, prompts, 3)
    got = F.fast_generate(small, prompts, 3)
    assert got.logits_hash == ref.logits_hash and got.token_hash == ref.token_hash
    assert got.generated == ref.generated
    one = G.generate(small, prompts[:1], 2)
    assert F.fast_generate(small, prompts[:1], 2, schedule=3).logits_hash[0] == one.logits_hash[0]


def test_fast_decoder_rejects_context_overflow(small):
    from reference.errors import OperandError

    dec = F.FastDecoder(small, 1, 4)
    with pytest.raises(OperandError, match="exceed the context"):
        dec.prefill(torch.tensor([[1, 2, 3, 4, 5]]), [5])
    dec.host_lengths = [4]  # as after a 4-token prefill: the host mirror guards decode
    with pytest.raises(OperandError, match="context of 4 tokens exhausted"):
        dec.step()


@pytest.mark.cuda
def test_cuda_graph_fast_path_reproduces_pinned_default_hash():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    shipped, ids = shipped_sonnet()
    eng = E.load_engine(shipped, None, "cuda", guard=False)
    r = F.fast_generate(eng, [ids], 16)
    assert r.info["cuda_graph"]
    assert (r.logits_hash[0], r.token_hash[0]) == (DEFAULT_LOGITS, DEFAULT_TOKENS)
    assert r.generated[0] == DEFAULT_GENERATED
    g = torch.Generator().manual_seed(8)
    co = [
        torch.randint(0, shipped.config["model"]["vocab"], (int(n),), generator=g).tolist()
        for n in torch.randint(1, 40, (7,), generator=g)
    ]
    assert F.fast_generate(eng, co[:3] + [ids] + co[3:], 16).logits_hash[3] == DEFAULT_LOGITS
    assert F.fast_generate(eng, [ids], 16, schedule="token").logits_hash[0] == DEFAULT_LOGITS
    assert F.fast_generate(eng, [ids], 16, use_graph=False).logits_hash[0] == DEFAULT_LOGITS


def test_bench_reports_put_the_hash_beside_every_figure(tmp_path):
    from detllm.bench_fast import write_reports

    rec = {
        "device": "NVIDIA H200",
        "torch": "2.11",
        "triton": "3.6",
        "prompt_len": 32,
        "new_tokens": 32,
        "timing": "graph replays",
        "errors": [],
        "before": [
            {
                "model": "qwen3-0.6B-shape",
                "backend": "detllm engine, int_mm",
                "batch": 1,
                "decode_tps": 2.8,
                "decode_hash": "fe6b9dafe0ab",
            }
        ],
        "checks": [{"model": "m", "check": "pinned", "ok": False, "got": "d1797143e78f", "expected": "c54e130c3f8a"}],
        "rows": [
            {
                "model": "qwen3-0.6B-shape",
                "artifact": "b03c",
                "batch": b,
                "int_decode_tps": 500.0 * b,
                "int_prefill_tps": 3000.0,
                "int_step_ms": 1.7,
                "logits_hash": "5f887b8804ab",
                "token_hash": "310c3bfd0a32",
                "bf16_eager_tps": 14.8,
                "bf16_graph_tps": None,
                "bf16_graph_error": "RuntimeError('capture')",
                "bf16_prefill_tps": 1300.0,
                "bf16_best_tps": 14.8,
                "int_over_bf16": 500.0 * b / 14.8,
            }
            for b in (1, 8)
        ],
    }
    write_reports(rec, tmp_path)
    md = (tmp_path / "detllm.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| qwen3-0.6B-shape | ")]
    assert len(rows) == 3 and all("`5f887b8804ab`" in r for r in rows[:2]) and "`fe6b9dafe0ab`" in rows[2]
    assert "| 4,000.0 |" in rows[1] and "| - |" in rows[0]  # b8 int tok/s; no bf16 graph figure
    assert "FAIL: m: pinned: got `d1797143e78f`, expected `c54e130c3f8a`" in md
    assert "bf16 CUDA graph not captured for qwen3-0.6B-shape b1" in md
    import json

    assert json.loads((tmp_path / "detllm.json").read_text())["rows"][1]["int_decode_tps"] == 4000.0
    assert (tmp_path / "detllm.png").stat().st_size > 1000
