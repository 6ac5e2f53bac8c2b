"""Derived checkpoints of a parent model, built on demand into a cache.

What ships and what is built (decision, see also README):

* shipped in the git tree: the parent bf16 default model
  (``reference/model/assets/default_model``) and its layer
  captures (``reference/model/assets/captures``: per-layer activations, a few
  hundred KiB per block);
* built on demand, deterministically, into the cache: the three W8A8
  compressed-tensors checkpoints of a parent -- ``own`` (the committed
  checkpoint: llm-compressor's per-channel scales), ``pow2-nearest`` and
  ``pow2-ceiling`` (requantized from the parent, each after the
  reconstruction gate passed). Captures refer to their tensors by name and
  digest instead of duplicating them.

Cache: ``$INT8CONF_CACHE`` if set, else ``~/.cache/int8conf``; layout
``<cache>/checkpoints/<parent digest[:16]>-<build code digest[:8]>/<kind>/``
(a normal
compressed-tensors checkpoint directory, servable by vLLM). Each build
records ``parent_digest`` and ``state_digest`` in ``config.json``
(``int8conf`` block); a cached entry whose recorded or recomputed digests
disagree is rebuilt; the build code digest (source of the quantizer,
pow2 and writer modules) keeps a changed quantizer from reusing stale
entries. Builds are atomic (directory renamed into place).
"""

from __future__ import annotations

import functools
from pathlib import Path

from reference.errors import CheckpointError
from reference.fileio import CACHE_ENV, cache_location
from reference.model.checkpoint import load_qwen3_state, state_digest

KINDS = ("own", "pow2-nearest", "pow2-ceiling")


def cache_dir(cache=None) -> Path:
    """The artifact cache directory (:func:`cache_location`), created if missing."""
    d = cache_location(cache)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"{d}: artifact cache not writable ({exc.strerror}); set ${CACHE_ENV}") from None
    return d


def default_parent_dir() -> Path:
    """The shipped default model (``reference.model.assets.default_model_dir()``)."""
    from reference.model.assets import default_model_dir

    return default_model_dir()


@functools.lru_cache(maxsize=8)
def _parent_cached(path: str, size_mtime: tuple) -> tuple:
    config, state = load_qwen3_state(path)
    return config, state, state_digest(state)


def weight_files(d: Path) -> list[Path]:
    """The files that define a checkpoint directory's weights, in a fixed order:
    its ``*.safetensors`` (sorted), the shard index (it names which file holds
    each tensor) and ``config.json``, those that exist."""
    return [
        p
        for p in sorted(d.glob("*.safetensors")) + [d / "model.safetensors.index.json", d / "config.json"]
        if p.is_file()
    ]


def _weight_files_key(d: Path) -> tuple:
    return tuple((p.name, st.st_size, st.st_mtime_ns) for p in weight_files(d) for st in (p.stat(),))


def load_parent(parent_dir) -> tuple[dict, dict, str]:
    """``(config, state, parent digest)`` of a float parent checkpoint,
    memoized per (path, file sizes and mtimes) within the process.

    Raises:
        CheckpointError: see :func:`reference.model.checkpoint.load_qwen3_state`.
    """
    d = Path(parent_dir).resolve()
    return _parent_cached(str(d), _weight_files_key(d))


def parent_digest(parent_dir) -> str:
    """:func:`reference.model.checkpoint.state_digest` of a parent checkpoint."""
    return load_parent(parent_dir)[2]


# Modules whose code determines a derived checkpoint's bytes (paths relative
# to the ``reference`` package).
_BUILD_MODULES = ("quantize.py", "model/pow2.py", "model/compressed_tensors.py", "model/checkpoint.py")


@functools.lru_cache(maxsize=1)
def build_code_digest() -> str:
    """SHA-256 hex of the source of the modules that build derived
    checkpoints; part of the cache key, so a changed quantizer never reuses
    checkpoints cached by the old code."""
    import hashlib

    h = hashlib.sha256()
    here = Path(__file__).resolve().parent.parent
    for name in _BUILD_MODULES:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()


def _kind_check(kind: str) -> None:
    if kind not in KINDS:
        raise CheckpointError(f"derived checkpoint kind={kind!r} is not one of {KINDS}")


@functools.lru_cache(maxsize=4)
def _read_cached(path: str, size_mtime: tuple):
    """``read_w8a8_checkpoint(path)`` memoized per (path, file sizes and
    mtimes) within the process, like :func:`load_parent`; a
    ``CheckpointError`` is not cached (it propagates).

    Why (issue 7d): a sweep's start-up resolves the derived checkpoints
    several times (the captures, then the own and pow2 directories), and
    every read re-hashed all tensors of the same unchanged files
    (``W8A8Checkpoint.digest``, a full-checkpoint SHA-256): 5 reads, ~7.5 s
    of the start of a Qwen3-1.7B-shaped sweep on the H200
    (``reports/sweep/h200-paper-scale/NOTE.md``). The digest is unchanged
    (the SHA-256 of the same bytes, taken on the first read); the returned
    object is shared, and no caller writes into it. At most 4 are held
    (own, pow2-nearest, pow2-ceiling and one more). Not covered (as in
    ``load_parent``): a file rewritten with the same size and ``mtime_ns``."""
    from reference.model.compressed_tensors import read_w8a8_checkpoint

    return read_w8a8_checkpoint(Path(path))


def _valid_entry(d: Path, pdigest: str):
    """The cached checkpoint at ``d`` if it is complete and its digests agree."""
    if not (d / "config.json").is_file():
        return None
    try:
        ck = _read_cached(str(d), _weight_files_key(d))  # ck.dir == d, as before
    except CheckpointError:
        return None
    if ck.meta.get("parent_digest") != pdigest or ck.meta.get("state_digest") != ck.digest:
        return None
    return ck


def derived_checkpoint(parent_dir, kind: str = "own", cache=None):
    """The W8A8 checkpoint ``kind`` of a parent, built into the cache if
    missing or invalid.

    Args:
        parent_dir: float parent Qwen3 directory.
        kind: ``own`` | ``pow2-nearest`` | ``pow2-ceiling``.
        cache: cache directory override (default :func:`cache_dir`).

    Returns:
        :class:`reference.model.compressed_tensors.W8A8Checkpoint`; equal parents
        give equal digests on every machine (pure integer / IEEE ops).

    Raises:
        CheckpointError: bad parent or kind; ReconstructionGateError (a
            CheckpointError) if the gate fails before a pow2 build.
    """
    from reference.model.compressed_tensors import build_w8a8_checkpoint
    from reference.model.pow2 import build_pow2_checkpoint

    _kind_check(kind)
    config, state, pdigest = load_parent(parent_dir)
    root = cache_dir(cache) / "checkpoints" / f"{pdigest[:16]}-{build_code_digest()[:8]}"
    target = root / kind
    ck = _valid_entry(target, pdigest)
    if ck is not None:
        return ck
    if kind == "own":
        ck = build_w8a8_checkpoint(parent_dir, target, parent=(config, state))
    else:
        own = derived_checkpoint(parent_dir, "own", cache)
        ck = build_pow2_checkpoint(parent_dir, own.dir, target, rule=kind.split("-", 1)[1], parent=(config, state))
    if ck.meta.get("state_digest") != ck.digest:
        raise CheckpointError(
            f"{target}: written checkpoint digest {ck.digest[:12]} does not match "
            f"the built tensors' {str(ck.meta.get('state_digest'))[:12]}"
        )
    return ck


def build_all(parent_dir, cache=None) -> dict:
    """Every derived checkpoint of ``parent_dir``: ``{kind: W8A8Checkpoint}``."""
    return {kind: derived_checkpoint(parent_dir, kind, cache) for kind in KINDS}
