"""Package data of the model pipeline: where the shipped files live and their manifest.

``assets_manifest.json`` (sha256 of every file in ``corpus/`` and ``default_model/``); ``corpus/`` (``corpus.json.xz``,
``split.json``, ``prompts.json``); ``default_model/`` (bf16 Qwen3 in Hugging Face layout plus ``train_log.json``);
``captures/`` (per-layer W8A8 captures with their own manifest). Built by ``int8conf build-corpus``, ``train-default``
and ``capture``; nothing here downloads anything."""

from __future__ import annotations

import json
from pathlib import Path

from reference.errors import CheckpointError
from reference.fileio import atomic_write_json
from reference.fileio import file_sha256 as file_digest  # public name of this module's API

_ROOT = Path(__file__).resolve().parent
MANIFEST_FILE = "assets_manifest.json"
# Only these sub-dirs are covered by the manifest (captures ship their own).
MANIFEST_DIRS = ("corpus", "default_model")


def assets_dir() -> Path:
    return _ROOT


def default_model_dir() -> Path:
    """The shipped default Qwen3 model (Hugging Face layout)."""
    return _ROOT / "default_model"


def corpus_dir() -> Path:
    return _ROOT / "corpus"


def read_asset_json(path: Path):
    """Parse a shipped JSON file; CheckpointError naming the file if missing or malformed."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing (run `int8conf build-corpus` / `int8conf train-default`)") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON (line {exc.lineno})") from None


def shipped_files(root: Path | None = None) -> list[str]:
    """Sorted posix paths, relative to ``root`` (default: this package), of every file under :data:`MANIFEST_DIRS`,
    excluding hidden, dunder and temp files."""
    root = Path(root) if root is not None else _ROOT
    out = []
    for sub in MANIFEST_DIRS:
        for p in sorted((root / sub).rglob("*")):
            parts = p.relative_to(root).parts
            if p.is_file() and p.suffix not in (".tmp", ".pyc") and not any(x.startswith((".", "__")) for x in parts):
                out.append(p.relative_to(root).as_posix())
    return sorted(out)


def write_manifest(root: Path | None = None) -> dict[str, str]:
    """Record and return ``{relative path: sha256}`` of :func:`shipped_files` in the manifest."""
    root = Path(root) if root is not None else _ROOT
    digests = {rel: file_digest(root / rel) for rel in shipped_files(root)}
    atomic_write_json(root / MANIFEST_FILE, {"sha256": digests})
    return digests


def verify_manifest(root: Path | None = None) -> dict[str, str]:
    """The manifest's mapping, after checking every recorded file exists with its sha256 and no shipped file is
    unrecorded (CheckpointError naming the first bad file)."""
    root = Path(root) if root is not None else _ROOT
    recorded = read_asset_json(root / MANIFEST_FILE)["sha256"]
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
