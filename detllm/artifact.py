"""The integer-only artifact: ``detllm.safetensors`` (every tensor the forward reads, integer dtypes only)
and ``detllm.json`` (model shape, unit exponents, calibration provenance, ``tensors_sha256``, ``digest``).

digest = sha256(canonical config JSON without "digest" || sha256 of the tensors file); the engine's
determinism guarantee is keyed by it. Save and load check the tensor set against the schema implied by
the config (``expected_tensors``), so an edited artifact fails at load with one line.
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
from reference.fileio import atomic_write_json, file_sha256, read_json_object

TENSORS_FILE = "detllm.safetensors"
CONFIG_FILE = "detllm.json"
FORMAT = "detllm-artifact-v1"
INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


@dataclass
class Artifact:
    """A loaded artifact: parsed config, ``{name: integer tensor}`` on CPU, digest, and its dir (None in memory)."""

    config: dict
    tensors: dict = field(default_factory=dict)
    digest: str = ""
    path: Optional[Path] = None


def assert_integer_tensors(tensors: Mapping[str, torch.Tensor], where: str) -> None:
    """CheckpointError (one line naming ``where``) if any entry is not an integer-dtype tensor."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{where}: entry {name!r} is {type(t).__name__}, not a tensor")
        if t.dtype not in INTEGER_DTYPES:
            raise CheckpointError(f"{where}: tensor {name!r} has dtype {t.dtype} (the artifact must be integer-only)")


MODEL_FIELDS = ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "max_position")
UNIT_FIELDS = ("resid_exp", "logit_exp", "qk_exp", "rope_exp", "score_exp", "resid_eps")
LAYER_FIELDS = ("q_norm_shift", "k_norm_shift", "q_norm_eps", "k_norm_eps", "gate_exp", "up_exp")

_I8, _I16, _I32, _I64 = torch.int8, torch.int16, torch.int32, torch.int64


def _int_field(cfg: Mapping, key: str, where: str, label: str, positive: bool = False) -> int:
    v = cfg.get(key) if isinstance(cfg, Mapping) else None
    if isinstance(v, bool) or not isinstance(v, int):
        raise CheckpointError(f"{where}: config field {label!r} is {v!r}, expected an integer")
    if positive and v < 1:
        raise CheckpointError(f"{where}: config field {label!r} is {v}, expected a positive integer")
    return v


def model_dims(config: Mapping, where: str = "artifact") -> dict:
    """{field: int} for ``MODEL_FIELDS`` of ``config["model"]``; CheckpointError (one line naming ``where``) for
    a missing or non-positive field, heads not a multiple of kv_heads, or an odd head_dim.
    """
    m = config.get("model") if isinstance(config, Mapping) else None
    if not isinstance(m, Mapping):
        raise CheckpointError(f"{where}: config field 'model' is missing or not an object")
    d = {k: _int_field(m, k, where, f"model.{k}", positive=True) for k in MODEL_FIELDS}
    if d["heads"] % d["kv_heads"] or d["head_dim"] % 2:
        raise CheckpointError(
            f"{where}: config model.heads={d['heads']} is not a multiple of model.kv_heads={d['kv_heads']} or model.head_dim={d['head_dim']} is odd"
        )
    return d


def expected_tensors(config: Mapping, where: str = "artifact") -> dict:
    """The artifact schema: config -> {name: (dtype, shape)}, exactly the tensors ``prepare`` writes.

    Per layer i: ``layers.i.{attn,mlp}_norm.g`` int32 [H]; ``{qkv,o,gate_up,down}.w`` int8 [N, K] with
    ``.m``/``.k`` int64 [N]; ``q_norm.g`` int32 [nh, hd], ``k_norm.g`` int32 [nkv, hd];
    ``{k_cache,score}.m/k`` int64 [nkv]. Then ``embed`` int32 [V, H], ``final_norm.g`` int32 [H],
    ``lm_head.w/m/k``, ``rope.cos/sin`` int16 [P, hd]. Raises CheckpointError for bad model dims.
    """
    d = model_dims(config, where)
    H, nh, nkv, hd = d["hidden"], d["heads"], d["kv_heads"], d["head_dim"]
    I, V, P = d["intermediate"], d["vocab"], d["max_position"]
    out: dict = {}

    def lin(name: str, n: int, k: int) -> None:
        out.update({name + ".w": (_I8, (n, k)), name + ".m": (_I64, (n,)), name + ".k": (_I64, (n,))})

    for i in range(d["layers"]):
        p = f"layers.{i}."
        out[p + "attn_norm.g"] = (_I32, (H,))
        lin(p + "qkv", (nh + 2 * nkv) * hd, H)
        out[p + "q_norm.g"] = (_I32, (nh, hd))
        out[p + "k_norm.g"] = (_I32, (nkv, hd))
        for n in ("k_cache.m", "k_cache.k", "score.m", "score.k"):
            out[p + n] = (_I64, (nkv,))
        lin(p + "o", H, nh * hd)
        out[p + "mlp_norm.g"] = (_I32, (H,))
        lin(p + "gate_up", 2 * I, H)
        lin(p + "down", H, I)
    out["embed"] = (_I32, (V, H))
    out["final_norm.g"] = (_I32, (H,))
    lin("lm_head", V, H)
    out["rope.cos"] = (_I16, (P, hd))
    out["rope.sin"] = (_I16, (P, hd))
    return out


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_schema(config: Mapping, tensors: Mapping[str, torch.Tensor], where) -> None:
    """CheckpointError (one line) unless ``tensors`` is exactly ``expected_tensors(config)`` (names, dtypes,
    shapes) and the config has the integer ``units`` and per-layer fields the engine reads.
    """
    w = f"artifact {where}"
    schema = expected_tensors(config, w)
    units = config.get("units")
    if not isinstance(units, Mapping):
        raise CheckpointError(f"{w}: config field 'units' is missing or not an object")
    for k in UNIT_FIELDS:
        _int_field(units, k, w, f"units.{k}")
    layers = config.get("layers")
    L = config["model"]["layers"]
    if not isinstance(layers, list) or len(layers) != L:
        n = len(layers) if isinstance(layers, list) else type(layers).__name__
        raise CheckpointError(f"{w}: config field 'layers' has {n} entries, expected {L} (model.layers)")
    for i, lc in enumerate(layers):
        if not isinstance(lc, Mapping):
            raise CheckpointError(f"{w}: config field 'layers[{i}]' is not an object")
        for k in LAYER_FIELDS:
            _int_field(lc, k, w, f"layers[{i}].{k}")
    missing = [n for n in schema if n not in tensors]
    if missing:
        dt, shape = schema[missing[0]]
        more = f"; {len(missing) - 1} more missing" if len(missing) > 1 else ""
        raise CheckpointError(f"{w}: tensor {missing[0]!r} is missing (expected {_dt(dt)} {list(shape)}{more})")
    extra = sorted(n for n in tensors if n not in schema)
    if extra:
        t = tensors[extra[0]]
        got = f"{_dt(t.dtype)} {list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        more = f"; {len(extra) - 1} more unexpected" if len(extra) > 1 else ""
        raise CheckpointError(
            f"{w}: unexpected tensor {extra[0]!r} ({got}); an artifact holds exactly the tensors `detllm prepare` writes{more}"
        )
    for name, (dt, shape) in schema.items():
        t = tensors[name]
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{w}: entry {name!r} is {type(t).__name__}, expected {_dt(dt)} tensor")
        if t.dtype != dt:
            raise CheckpointError(f"{w}: tensor {name!r} has dtype {_dt(t.dtype)}, expected {_dt(dt)}")
        if tuple(t.shape) != shape:
            raise CheckpointError(f"{w}: tensor {name!r} has shape {list(t.shape)}, expected {list(shape)}")


def _canonical(config: Mapping) -> bytes:
    body = {k: v for k, v in config.items() if k != "digest"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def artifact_digest(config: Mapping, tensors_sha256: str) -> str:
    """sha256 hex over the canonical config (without ``digest``) and the tensors file's sha256 hex."""
    return hashlib.sha256(_canonical(config) + tensors_sha256.encode("ascii")).hexdigest()


def save_artifact(out_dir, config: dict, tensors: Mapping[str, torch.Tensor]) -> Artifact:
    """Write an artifact dir atomically (per file); fills in ``format``, ``tensors_sha256`` and ``digest``.

    Raises CheckpointError for a non-integer tensor or tensors not matching the schema (checked first).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    assert_integer_tensors(tensors, str(out / TENSORS_FILE))
    check_schema(config, tensors, out)
    cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    fd, tmp = tempfile.mkstemp(dir=out, prefix=TENSORS_FILE + ".", suffix=".tmp")
    os.close(fd)
    try:
        save_file(cpu, tmp, metadata={"format": FORMAT})
        sha = file_sha256(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, out / TENSORS_FILE)
    except BaseException:  # noqa: BLE001 -- cleanup then re-raise: no temporary file left behind
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    cfg = {k: v for k, v in config.items() if k != "digest"}
    cfg.update(format=FORMAT, tensors_sha256=sha)
    cfg["digest"] = artifact_digest(cfg, sha)
    atomic_write_json(out / CONFIG_FILE, cfg, indent=1, ensure_ascii=True)
    return Artifact(config=cfg, tensors=cpu, digest=cfg["digest"], path=out)


def is_artifact_dir(path) -> bool:
    """True if ``path`` holds both artifact files. Never raises."""
    p = Path(path)
    return (p / CONFIG_FILE).is_file() and (p / TENSORS_FILE).is_file()


def load_artifact(path, expect_digest: Optional[str] = None) -> Artifact:
    """Load and verify an artifact dir -> Artifact with CPU tensors.

    Checks: both files, ``format``, ``tensors_sha256`` and ``digest`` present and matching (and
    ``expect_digest``, full or a prefix of >= 12 hex digits), integer dtypes, ``check_schema``.
    Raises CheckpointError: one line naming the file and the failed check.
    """
    p = Path(path)
    cfg_path, ten_path = p / CONFIG_FILE, p / TENSORS_FILE
    hint = "not a detllm artifact; run `detllm prepare`"
    if not ten_path.is_file():
        raise CheckpointError(f"{ten_path}: missing ({hint})")
    cfg = read_json_object(cfg_path, CheckpointError, hint)
    if cfg.get("format") != FORMAT:
        raise CheckpointError(f"{cfg_path}: field 'format' is not {FORMAT!r}")
    for key in ("tensors_sha256", "digest"):
        if not isinstance(cfg.get(key), str):
            what = "missing" if key not in cfg else "not a string"
            raise CheckpointError(f"{cfg_path}: field {key!r} is {what} (re-run `detllm prepare`)")
    sha = file_sha256(ten_path)
    if sha != cfg.get("tensors_sha256"):
        raise CheckpointError(
            f"{ten_path}: sha256 {sha[:12]} does not match tensors_sha256 {str(cfg.get('tensors_sha256'))[:12]} in {CONFIG_FILE}"
        )
    dig = artifact_digest(cfg, sha)
    if dig != cfg.get("digest"):
        raise CheckpointError(
            f"{cfg_path}: artifact digest {dig[:12]} does not match the recorded digest {str(cfg.get('digest'))[:12]} (config edited?)"
        )
    if expect_digest is not None:
        e = str(expect_digest).lower()
        if len(e) < 12 or not dig.startswith(e):
            raise CheckpointError(f"{p}: artifact digest {dig[:12]} is not the expected {e[:12]}")
    try:
        tensors = load_file(str(ten_path))
    except (_SafetensorsError, OSError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{ten_path}: unreadable safetensors ({exc.__class__.__name__})") from None
    assert_integer_tensors(tensors, str(ten_path))
    check_schema(cfg, tensors, p)
    return Artifact(config=cfg, tensors=tensors, digest=dig, path=p)
