"""The shipped Shakespeare corpus (``reference/model/assets/corpus/``, written by ``reference.model.build_corpus``):
the train / validation / held-out split of whole works, the 8 fixed prompts and the held-out evaluation windows."""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
from pathlib import Path

import torch
from tokenizers import Tokenizer

from reference.errors import CheckpointError, Int8confError
from reference.model.assets import corpus_dir, read_asset_json
from reference.model.tokenizer import load_tokenizer, token_stream


@functools.lru_cache(maxsize=4)
def _load_works(path_str: str, expect_sha: str | None) -> dict[str, str]:
    path = Path(path_str)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing (run `int8conf build-corpus`)") from None
    if expect_sha is not None and hashlib.sha256(blob).hexdigest() != expect_sha:
        raise CheckpointError(f"{path}: sha256 does not match corpus_sha256 in split.json")
    try:
        return json.loads(lzma.decompress(blob).decode("utf-8"))
    except (lzma.LZMAError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: corrupt corpus ({exc.__class__.__name__})") from None


def load_corpus_split(directory: Path | None = None) -> dict:
    """``{"train" | "validation" | "heldout": {work: text}, "meta": split.json}``, works in ``split.json`` order.
    CheckpointError if a file is missing or the corpus digest differs."""
    d = Path(directory) if directory is not None else corpus_dir()
    meta = read_asset_json(d / "split.json")
    works = _load_works(str(d / "corpus.json.xz"), meta.get("corpus_sha256"))
    out = {"meta": meta}
    for part in ("train", "validation", "heldout"):
        missing = [w for w in meta[part] if w not in works]
        if missing:
            raise CheckpointError(f"{d / 'corpus.json.xz'}: split.json names missing work {missing[0]!r}")
        out[part] = {w: works[w] for w in meta[part]}
    return out


def prompts(directory: Path | None = None) -> list[str]:
    """The 8 fixed prompts (``prompts[0]``: the opening line of Sonnet 18)."""
    d = Path(directory) if directory is not None else corpus_dir()
    return list(read_asset_json(d / "prompts.json")["prompts"])


_STREAM_CACHE: dict[str, torch.Tensor] = {}


def _heldout_stream(tok) -> torch.Tensor:
    """Held-out token stream (LongTensor [T]), cached per ``tokenizers.Tokenizer`` content."""
    key = hashlib.sha256(tok.to_str().encode()).hexdigest() if isinstance(tok, Tokenizer) else None
    if key is not None and key in _STREAM_CACHE:
        return _STREAM_CACHE[key]
    stream = torch.tensor(token_stream(tok, load_corpus_split()["heldout"]), dtype=torch.long)
    if key is not None:
        _STREAM_CACHE[key] = stream
    return stream


def eval_windows(tokenizer=None, n: int = 8, length: int = 256) -> torch.Tensor:
    """LongTensor ``[n, length]``: of the W non-overlapping windows of the held-out works (tokenized one by one, joined
    with EOT), those at ``round(linspace(0, W-1, n))``. Int8confError if ``n`` or ``length`` < 1 or n > W."""
    if n < 1 or length < 1:
        raise Int8confError(f"eval_windows: n={n} and length={length} must both be >= 1")
    tok = tokenizer if tokenizer is not None else load_tokenizer()
    stream = _heldout_stream(tok)
    w = stream.numel() // length
    if n > w:
        raise Int8confError(f"eval_windows: n={n} exceeds the {w} held-out windows of length {length}")
    idx = torch.linspace(0, w - 1, n, dtype=torch.float64).round().long()
    return stream[: w * length].view(w, length)[idx].clone()
