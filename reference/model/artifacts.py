"""Derived W8A8 checkpoints of a parent model, built on demand into a cache.

The parent bf16 default model and its captures ship in the tree; the three compressed-tensors children (``own``,
``pow2-nearest``, ``pow2-ceiling``) are built deterministically into
``<cache>/checkpoints/<parent digest[:16]>-<build code digest[:8]>/<kind>/`` (cache: ``$INT8CONF_CACHE`` or
``~/.cache/int8conf``). An entry whose recorded ``parent_digest`` / ``state_digest`` disagree is rebuilt; builds are
atomic (directory renamed into place)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from reference import memo
from reference.errors import CheckpointError
from reference.fileio import CACHE_ENV, cache_location
from reference.model import compressed_tensors
from reference.model.assets import default_model_dir
from reference.model.checkpoint import load_qwen3_state, state_digest
from reference.model.compressed_tensors import build_w8a8_checkpoint
from reference.model.pow2 import build_pow2_checkpoint, reconstruction_gate
from reference.operands import tensor_digests
from reference.validate import check_device

KINDS = ("own", "pow2-nearest", "pow2-ceiling")
# Modules (relative to ``reference``) whose source determines a derived checkpoint's bytes.
_BUILD_MODULES = ("quantize.py", "model/pow2.py", "model/compressed_tensors.py", "model/checkpoint.py")


def cache_dir(cache=None) -> Path:
    """The artifact cache directory (:func:`cache_location`), created; CheckpointError if not writable."""
    d = cache_location(cache)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"{d}: artifact cache not writable ({exc.strerror}); set ${CACHE_ENV}") from None
    return d


def default_parent_dir() -> Path:
    return default_model_dir()


@functools.lru_cache(maxsize=8)
def _parent_cached(path: str, size_mtime: tuple) -> tuple:
    config, state = load_qwen3_state(path)
    return config, state, state_digest(state)


def weight_files(d: Path) -> list[Path]:
    """The existing files defining a checkpoint's weights: ``*.safetensors`` (sorted), shard index, ``config.json``."""
    candidates = sorted(d.glob("*.safetensors")) + [d / "model.safetensors.index.json", d / "config.json"]
    return [p for p in candidates if p.is_file()]


def _weight_files_key(d: Path) -> tuple:
    return tuple((p.name, st.st_size, st.st_mtime_ns) for p in weight_files(d) for st in (p.stat(),))


def load_parent(parent_dir) -> tuple[dict, dict, str]:
    """``(config, state, parent digest)`` of a float parent checkpoint, memoized per (path, file sizes and mtimes).
    CheckpointError as :func:`load_qwen3_state`."""
    d = Path(parent_dir).resolve()
    return _parent_cached(str(d), _weight_files_key(d))


def parent_digest(parent_dir) -> str:
    return load_parent(parent_dir)[2]


@functools.lru_cache(maxsize=1)
def build_code_digest() -> str:
    """SHA-256 hex of the source of the modules that build derived checkpoints (part of the cache key)."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent.parent
    for name in _BUILD_MODULES:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=4)
def _read_cached(path: str, size_mtime: tuple):
    """``read_w8a8_checkpoint(path)`` memoized per (path, file sizes and mtimes); the returned object is shared and must
    not be written into. Errors are not cached."""
    return compressed_tensors.read_w8a8_checkpoint(Path(path))  # module attribute: tests count the reads


#: ``{dir: (weight files key, W8A8Checkpoint)}`` of the checkpoints built by this process (the most recent few): their
#: tensors are what was written, so they are not read back (a later process reads and hashes the files).
_BUILT: dict = {}
_BUILT_MAX = 4
#: ``{(parent digest, own digest): reconstruction gate result}`` passed in this process (the gate runs once per pair).
_GATES: dict = {}


def _remember_built(ck) -> None:
    _BUILT.pop(str(ck.dir), None)
    _BUILT[str(ck.dir)] = (_weight_files_key(Path(ck.dir)), ck)
    while len(_BUILT) > _BUILT_MAX:
        _BUILT.pop(next(iter(_BUILT)))


def _valid_entry(d: Path, pdigest: str):
    """The cached checkpoint at ``d`` if it is complete and its digests agree, else None."""
    if not (d / "config.json").is_file():
        return None
    key = _weight_files_key(d)
    built = _BUILT.get(str(d))
    try:
        ck = built[1] if built is not None and built[0] == key else _read_cached(str(d), key)
    except CheckpointError:
        return None
    if ck.meta.get("parent_digest") != pdigest or ck.meta.get("state_digest") != ck.digest:
        return None
    return ck


def derived_checkpoint(parent_dir, kind: str = "own", cache=None, device="cpu"):
    """The ``W8A8Checkpoint`` ``kind`` (:data:`KINDS`) of a parent, built into the cache if missing or invalid, its
    quantizers run on ``device`` (``cpu``, ``cuda``, ``cuda:N``; not part of the cache key: every device builds the
    same bytes). A checkpoint built here is not read back (``_BUILT``); the reconstruction gate runs once per parent
    and own checkpoint, and not at all for an own checkpoint built here from that parent (its rebuild is the build).
    CheckpointError: bad parent, kind or device, or the reconstruction gate failed."""
    if kind not in KINDS:
        raise CheckpointError(f"derived checkpoint kind={kind!r} is not one of {KINDS}")
    check_device(device, "device", CheckpointError)
    parent = load_parent(parent_dir)
    pdigest = parent[2]
    target = cache_dir(cache) / "checkpoints" / f"{pdigest[:16]}-{build_code_digest()[:8]}" / kind
    ck = _valid_entry(target, pdigest)
    if ck is not None:
        return ck
    with memo.scope():
        if kind == "own":
            ck = build_w8a8_checkpoint(parent_dir, target, parent=parent, device=device)
            # the gate's rebuild of this very checkpoint is this build: the same quantizer on the same tensors
            digests = dict(zip(ck.tensors(), tensor_digests(list(ck.tensors().values()))))
            gate = {"passed": True, "tensors": len(digests), "state_digest": ck.digest, "parent_digest": pdigest}
            _GATES[(pdigest, ck.digest)] = gate | {"tensor_digests": digests}
        else:
            own = derived_checkpoint(parent_dir, "own", cache, device)
            gate = _GATES.get((pdigest, own.digest))
            if gate is None:
                gate = reconstruction_gate(parent_dir, own.dir, parent=parent, device=device)
                _GATES[(pdigest, own.digest)] = gate
            rule = kind.split("-", 1)[1]
            ck = build_pow2_checkpoint(parent_dir, own.dir, target, rule=rule, parent=parent, device=device, gate=gate)
    if ck.meta.get("state_digest") != ck.digest:
        raise CheckpointError(
            f"{target}: written checkpoint digest {ck.digest[:12]} does not match "
            f"the built tensors' {str(ck.meta.get('state_digest'))[:12]}"
        )
    _remember_built(ck)
    return ck


def build_all(parent_dir, cache=None) -> dict:
    """``{kind: W8A8Checkpoint}`` for every derived kind of ``parent_dir``."""
    return {kind: derived_checkpoint(parent_dir, kind, cache) for kind in KINDS}
