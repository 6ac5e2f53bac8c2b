"""Package data: the default Qwen3 model and the Shakespeare corpus.

Layout::

    reference/assets/
      assets_manifest.json       sha256 of every file in corpus/ and default_model/
      corpus/corpus.json.xz      {work: cleaned text}, xz-compressed JSON
      corpus/split.json          train / validation / heldout works (whole works)
      corpus/prompts.json        8 fixed prompts (prompts[0]: Sonnet 18)
      default_model/             config.json, model.safetensors (bf16),
                                 tokenizer.json, tokenizer_config.json,
                                 generation_config.json, train_log.json

Built by ``int8conf build-corpus`` (``reference/corpus.py``) and
``int8conf train-default`` (``reference/train_default.py``). Nothing here
downloads anything.
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
from pathlib import Path

import torch

from reference.errors import CheckpointError, Int8confError
from reference.fileio import atomic_write_json
from reference.fileio import file_sha256 as file_digest  # public name of this module's API

_ROOT = Path(__file__).resolve().parent
MANIFEST_FILE = "assets_manifest.json"
# Only these sub-dirs are covered by the manifest (other owners ship their own
# package data, e.g. captures, under reference/assets/ with their own digests).
MANIFEST_DIRS = ("corpus", "default_model")
EOT = "<|endoftext|>"


def assets_dir() -> Path:
    """Directory holding the package data (``reference/assets``)."""
    return _ROOT


def default_model_dir() -> Path:
    """Directory of the shipped default Qwen3 model (Hugging Face layout;
    loads with ``transformers.Qwen3ForCausalLM.from_pretrained``)."""
    return _ROOT / "default_model"


def corpus_dir() -> Path:
    """Directory of the shipped corpus (``corpus.json.xz``, ``split.json``,
    ``prompts.json``)."""
    return _ROOT / "corpus"


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing (run `int8conf build-corpus` / `int8conf train-default`)") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON (line {exc.lineno})") from None


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
    """The cleaned corpus, split into whole works.

    Returns ``{"train": {work: text}, "validation": {work: text},
    "heldout": {work: text}, "meta": <split.json contents>}``; each inner
    dict keeps the work order listed in ``split.json``. Raises CheckpointError
    if a file is missing or the corpus digest does not match ``split.json``."""
    d = Path(directory) if directory is not None else corpus_dir()
    meta = _read_json(d / "split.json")
    works = _load_works(str(d / "corpus.json.xz"), meta.get("corpus_sha256"))
    out = {"meta": meta}
    for part in ("train", "validation", "heldout"):
        missing = [w for w in meta[part] if w not in works]
        if missing:
            raise CheckpointError(f"{d / 'corpus.json.xz'}: split.json names missing work {missing[0]!r}")
        out[part] = {w: works[w] for w in meta[part]}
    return out


def prompts(directory: Path | None = None) -> list[str]:
    """The 8 fixed prompts (``prompts[0]`` is the opening line of Sonnet 18,
    "Shall I compare thee to a summer's day?")."""
    d = Path(directory) if directory is not None else corpus_dir()
    return list(_read_json(d / "prompts.json")["prompts"])


def load_tokenizer(model_dir: Path | None = None):
    """The byte-level BPE tokenizer (``tokenizers.Tokenizer``) of a model dir
    (default: the shipped default model). Raises CheckpointError if missing."""
    from tokenizers import Tokenizer

    path = Path(model_dir if model_dir is not None else default_model_dir()) / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: missing tokenizer.json")
    return Tokenizer.from_file(str(path))


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens, for either a
    ``tokenizers.Tokenizer`` or a transformers tokenizer."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return tokenizer.encode(text, add_special_tokens=False).ids
    return list(tokenizer.encode(text, add_special_tokens=False))


def eot_id(tokenizer) -> int:
    """Id of the ``<|endoftext|>`` separator token (CheckpointError if the
    tokenizer lacks it)."""
    from tokenizers import Tokenizer

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


_STREAM_CACHE: dict[str, torch.Tensor] = {}


def _heldout_stream(tok) -> torch.Tensor:
    """Held-out token stream (LongTensor [T]); cached per tokenizer content
    for ``tokenizers.Tokenizer`` (keyed by the sha256 of its JSON)."""
    from tokenizers import Tokenizer

    key = hashlib.sha256(tok.to_str().encode()).hexdigest() if isinstance(tok, Tokenizer) else None
    if key is not None and key in _STREAM_CACHE:
        return _STREAM_CACHE[key]
    stream = torch.tensor(token_stream(tok, load_corpus_split()["heldout"]), dtype=torch.long)
    if key is not None:
        _STREAM_CACHE[key] = stream
    return stream


def eval_windows(tokenizer=None, n: int = 8, length: int = 256) -> torch.Tensor:
    """Fixed held-out evaluation windows.

    ``tokenizer``: ``tokenizers.Tokenizer`` or transformers tokenizer (None:
    the default model's). The held-out works (``split.json``) are tokenized
    separately and joined with the EOT id; the stream is cut into
    W = len // length consecutive non-overlapping windows and the windows at
    indices ``round(linspace(0, W-1, n))`` are returned, so windows spread
    over every held-out work. Returns LongTensor ``[n, length]`` (token ids).
    Raises Int8confError if ``n``/``length`` < 1 or n > W."""
    if n < 1 or length < 1:
        raise Int8confError(f"eval_windows: n={n} and length={length} must both be >= 1")
    tok = tokenizer if tokenizer is not None else load_tokenizer()
    stream = _heldout_stream(tok)
    w = stream.numel() // length
    if n > w:
        raise Int8confError(f"eval_windows: n={n} exceeds the {w} held-out windows of length {length}")
    idx = torch.linspace(0, w - 1, n, dtype=torch.float64).round().long()
    return stream[: w * length].view(w, length)[idx].clone()


def shipped_files(root: Path | None = None) -> list[str]:
    """Relative paths (posix, sorted) of every shipped file under the
    manifest's dirs (``corpus/``, ``default_model/``) of ``root`` (default:
    this package's dir), excluding hidden and temp files."""
    root = Path(root) if root is not None else _ROOT
    out = []
    for sub in MANIFEST_DIRS:
        for p in sorted((root / sub).rglob("*")):
            parts = p.relative_to(root).parts
            if p.is_file() and p.suffix not in (".tmp", ".pyc") and not any(x.startswith((".", "__")) for x in parts):
                out.append(p.relative_to(root).as_posix())
    return sorted(out)


def write_manifest(root: Path | None = None) -> dict[str, str]:
    """Record ``{relative path: sha256}`` of every shipped corpus/model file
    in ``<root>/assets_manifest.json`` (atomically). Returns the mapping."""
    root = Path(root) if root is not None else _ROOT
    digests = {rel: file_digest(root / rel) for rel in shipped_files(root)}
    atomic_write_json(root / MANIFEST_FILE, {"sha256": digests})
    return digests


def verify_manifest(root: Path | None = None) -> dict[str, str]:
    """Check every file in ``<root>/assets_manifest.json`` exists with the
    recorded sha256 and no shipped file is unrecorded. Returns the mapping;
    raises CheckpointError naming the first mismatching file."""
    root = Path(root) if root is not None else _ROOT
    recorded = _read_json(root / MANIFEST_FILE)["sha256"]
    for rel, digest in recorded.items():
        path = root / rel
        if not path.is_file():
            raise CheckpointError(f"{path}: listed in {MANIFEST_FILE} but missing")
        if file_digest(path) != digest:
            raise CheckpointError(f"{path}: sha256 does not match {MANIFEST_FILE}")
    extra = sorted(set(shipped_files(root)) - set(recorded))
    if extra:
        raise CheckpointError(f"{root / extra[0]}: shipped but not recorded in {MANIFEST_FILE}")
    return recorded
