"""A tiny random Qwen3 for model-level tests (transformers, bf16, eval)."""

from __future__ import annotations

import torch

VOCAB = 512


def tiny_model(seed: int = 0):
    """The brief's tiny random Qwen3: 2 blocks, hidden 256, 4 heads / 2 KV
    heads, head_dim 64, intermediate 1536 (K = 1536 > 1024 for down_proj),
    vocab 512, tied embeddings; bf16, eval."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=1536,
        tie_word_embeddings=True,
        max_position_embeddings=256,
    )
    return Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
