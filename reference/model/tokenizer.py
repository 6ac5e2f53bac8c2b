"""The default model's tokenizer (byte-level BPE, ``tokenizer.json``): loading it, encoding text, the EOT separator.
Every function also accepts a transformers tokenizer, so any Hugging Face Qwen3 checkpoint directory works."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from reference.errors import CheckpointError
from reference.model.assets import default_model_dir

EOT = "<|endoftext|>"


def load_tokenizer(model_dir: Path | None = None):
    """The ``tokenizers.Tokenizer`` of a model dir (default: the shipped model); CheckpointError if missing."""
    path = Path(model_dir if model_dir is not None else default_model_dir()) / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: missing tokenizer.json")
    return Tokenizer.from_file(str(path))


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens."""
    if isinstance(tokenizer, Tokenizer):
        return tokenizer.encode(text, add_special_tokens=False).ids
    return list(tokenizer.encode(text, add_special_tokens=False))


def eot_id(tokenizer) -> int:
    """Id of the ``<|endoftext|>`` token (CheckpointError if the tokenizer lacks it)."""
    tid = tokenizer.token_to_id(EOT) if isinstance(tokenizer, Tokenizer) else tokenizer.convert_tokens_to_ids(EOT)
    if tid is None or (not isinstance(tokenizer, Tokenizer) and tid == getattr(tokenizer, "unk_token_id", -1)):
        raise CheckpointError(f"tokenizer has no {EOT} token")
    return int(tid)


def token_stream(tokenizer, works: dict[str, str]) -> list[int]:
    """Works tokenized one by one (in dict order), joined by the EOT id."""
    sep = eot_id(tokenizer)
    ids: list[int] = []
    for i, text in enumerate(works.values()):
        if i:
            ids.append(sep)
        ids.extend(encode(tokenizer, text))
    return ids
