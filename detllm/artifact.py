"""The integer-only artifact of the detllm engine (issue 4, deliverable 3).

Layout of an artifact directory::

    detllm.safetensors   every tensor the forward reads; integer dtypes ONLY
                         (int8 weights, int16 RoPE tables, int32/int64
                         mantissas, shifts, norm multipliers, the exp2 table)
    detllm.json          config: model shape, every shift / unit exponent,
                         calibration provenance, ``tensors_sha256`` and the
                         artifact ``digest``

The digest is ``sha256(canonical JSON of the config without "digest" ||
sha256 of detllm.safetensors)``; the determinism guarantee of the engine is
tied to it (same digest -> same logits hash for every correct kernel, batch
composition, prefill split and device). ``load_artifact`` recomputes it and
refuses a mismatch, and refuses any floating-point tensor.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import torch
from safetensors import SafetensorError as _SafetensorsError
from safetensors.torch import load_file, save_file

from reference.errors import CheckpointError

TENSORS_FILE = "detllm.safetensors"
CONFIG_FILE = "detllm.json"
FORMAT = "detllm-artifact-v1"
INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


@dataclass
class Artifact:
    """A loaded integer-only artifact.

    Attributes:
        config: the parsed ``detllm.json`` (dims, shifts, provenance, digest).
        tensors: ``{name: integer tensor}`` on CPU (``engine`` moves them).
        digest: sha256 hex of the artifact (see module docstring).
        path: directory it was loaded from / written to (None if in memory).
    """

    config: dict
    tensors: dict = field(default_factory=dict)
    digest: str = ""
    path: Optional[Path] = None

    @property
    def short_digest(self) -> str:
        """First 12 hex digits of the digest (shown in tables)."""
        return self.digest[:12]


def assert_integer_tensors(tensors: Mapping[str, torch.Tensor], where: str) -> None:
    """Raise CheckpointError (one line) if any tensor is not an integer dtype.

    Args:
        tensors: name -> tensor.
        where: file / context named in the message.
    Raises:
        CheckpointError: ``"<where>: tensor 'x' has floating dtype torch.float32
            (the artifact must be integer-only)"``.
    """
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{where}: entry {name!r} is {type(t).__name__}, not a tensor")
        if t.dtype not in INTEGER_DTYPES:
            raise CheckpointError(
                f"{where}: tensor {name!r} has dtype {t.dtype} (the artifact must be integer-only)")


def _canonical(config: Mapping) -> bytes:
    body = {k: v for k, v in config.items() if k != "digest"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def artifact_digest(config: Mapping, tensors_sha256: str) -> str:
    """sha256 hex over the canonical config (without ``digest``) and the
    tensors file's sha256 (hex)."""
    h = hashlib.sha256()
    h.update(_canonical(config))
    h.update(tensors_sha256.encode("ascii"))
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _atomic_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_artifact(out_dir, config: dict, tensors: Mapping[str, torch.Tensor]) -> Artifact:
    """Write an artifact directory atomically (each file via temp + os.replace).

    Args:
        out_dir: directory (created if missing).
        config: JSON-able dict (dims, shifts, provenance). ``format``,
            ``tensors_sha256`` and ``digest`` are filled in here.
        tensors: name -> integer tensor (asserted: no float tensor is written).
    Returns:
        The Artifact (tensors as given, contiguous CPU).
    Raises:
        CheckpointError: a non-integer tensor.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    assert_integer_tensors(tensors, str(out / TENSORS_FILE))
    cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    fd, tmp = tempfile.mkstemp(dir=out, prefix=TENSORS_FILE + ".", suffix=".tmp")
    os.close(fd)
    try:
        save_file(cpu, tmp, metadata={"format": FORMAT})
        sha = _file_sha256(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, out / TENSORS_FILE)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    cfg = dict(config)
    cfg["format"] = FORMAT
    cfg["tensors_sha256"] = sha
    cfg.pop("digest", None)
    cfg["digest"] = artifact_digest(cfg, sha)
    _atomic_bytes(out / CONFIG_FILE, (json.dumps(cfg, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    return Artifact(config=cfg, tensors=cpu, digest=cfg["digest"], path=out)


def is_artifact_dir(path) -> bool:
    """True if ``path`` holds ``detllm.json`` and ``detllm.safetensors``. Never raises."""
    p = Path(path)
    return (p / CONFIG_FILE).is_file() and (p / TENSORS_FILE).is_file()


def load_artifact(path, expect_digest: Optional[str] = None) -> Artifact:
    """Load and verify an artifact directory.

    Checks, in order: both files exist; the config is JSON with
    ``format == detllm-artifact-v1``; the tensors file's sha256 equals
    ``tensors_sha256``; the recomputed digest equals ``digest`` (and
    ``expect_digest`` if given, full or a prefix of >= 12 hex digits); every
    tensor is an integer dtype.

    Returns:
        Artifact with CPU tensors.
    Raises:
        CheckpointError: one line naming the file and the failed check.
    """
    p = Path(path)
    cfg_path, ten_path = p / CONFIG_FILE, p / TENSORS_FILE
    for f in (cfg_path, ten_path):
        if not f.is_file():
            raise CheckpointError(f"{f}: missing (not a detllm artifact; run `detllm prepare`)")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{cfg_path}: not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise CheckpointError(f"{cfg_path}: field 'format' is not {FORMAT!r}")
    sha = _file_sha256(ten_path)
    if sha != cfg.get("tensors_sha256"):
        raise CheckpointError(f"{ten_path}: sha256 {sha[:12]} does not match tensors_sha256 "
                              f"{str(cfg.get('tensors_sha256'))[:12]} in {CONFIG_FILE}")
    dig = artifact_digest(cfg, sha)
    if dig != cfg.get("digest"):
        raise CheckpointError(f"{cfg_path}: artifact digest {dig[:12]} does not match the recorded "
                              f"digest {str(cfg.get('digest'))[:12]} (config edited?)")
    if expect_digest is not None:
        e = str(expect_digest).lower()
        if len(e) < 12 or not dig.startswith(e):
            raise CheckpointError(f"{p}: artifact digest {dig[:12]} is not the expected {e[:12]}")
    try:
        tensors = load_file(str(ten_path))
    except (_SafetensorsError, OSError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{ten_path}: unreadable safetensors ({exc.__class__.__name__})") from None
    assert_integer_tensors(tensors, str(ten_path))
    return Artifact(config=cfg, tensors=tensors, digest=dig, path=p)
