"""The shipped byte-level BPE tokenizer."""

import hashlib

import pytest

from reference.model.assets import default_model_dir
from reference.model.corpus import load_corpus_split, prompts
from reference.model.tokenizer import EOT, load_tokenizer
from reference.model.train import VOCAB_SIZE, train_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.mark.parametrize(
    "text",
    [
        "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n",
        "  leading spaces,\ttabs\r\nand CRLF\n\n\n",
        "naïve café — “quotes” 漢字 😀 \x00\x7f",
        "",
    ],
)
def test_round_trip_is_exact(tok, text):
    assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text


def test_round_trip_on_prompts_and_heldout_text(tok):
    text = load_corpus_split()["heldout"]["lovers_complaint"]
    ids = tok.encode(text).ids
    assert tok.decode(ids) == text
    assert 3.0 < len(text) / len(ids) < 4.5  # BPE compresses ~3.5 chars per token on this text
    for p in prompts():
        assert tok.decode(tok.encode(p).ids) == p


def test_vocab_and_special_token(tok):
    assert tok.get_vocab_size() == VOCAB_SIZE == 4096
    assert tok.token_to_id(EOT) == 0
    assert tok.encode(f"a{EOT}b").ids[1] == 0
    # all 256 byte symbols present: any byte sequence is encodable without unknowns
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    assert len(alphabet) == 256 and all(tok.token_to_id(c) is not None for c in alphabet)


def test_tokenizer_rebuild_is_byte_identical(tmp_path):
    out = train_tokenizer(tmp_path)
    shipped = (default_model_dir() / "tokenizer.json").read_bytes()
    assert (tmp_path / "tokenizer.json").read_bytes() == shipped
    assert out["tokenizer_sha256"] == hashlib.sha256(shipped).hexdigest()
    assert (tmp_path / "tokenizer_config.json").read_bytes() == (
        default_model_dir() / "tokenizer_config.json"
    ).read_bytes()
