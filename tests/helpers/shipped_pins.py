"""Known-right values of the shipped detllm artifact (default model, Sonnet 18,
16 greedy tokens), shared by the CPU and CUDA engine tests. The engine is
integer-only, so these hashes are the same on every machine, kernel, batch and
prefill split for this artifact digest."""

from __future__ import annotations

import pytest

DEFAULT_DIGEST = "8ea2b6f9240c9da151006222c1a0c698a251beab01a5a927c476bfb684ef9939"
DEFAULT_LOGITS = "c54e130c3f8a14a0ad1d4fb1f046663605f67bcf88202cd3c90a1c6d693e0edf"
DEFAULT_TOKENS = "2f454eed0248e6e2778ee79c0446eba4e1621347cdf3d886df35cb785b8af762"
DEFAULT_GENERATED = [199, 199, 59, 526, 436, 778, 1757, 355, 199, 199, 1680, 14, 199, 47, 12, 3648]


def shipped_sonnet():
    """``(artifact, ids)``: the shipped artifact and the token ids of the
    corpus's first prompt (Sonnet 18); skips the test when the shipped
    artifact is not the pinned one (re-pin the hashes)."""
    from detllm.artifact import load_artifact
    from detllm.prepare import SHIPPED_DIR
    from reference.model.corpus import prompts
    from reference.model.tokenizer import encode, load_tokenizer

    shipped = load_artifact(SHIPPED_DIR)
    if shipped.digest != DEFAULT_DIGEST:
        pytest.skip("shipped artifact changed (re-pin the hashes)")
    return shipped, encode(load_tokenizer(), prompts()[0])
