"""The integer-only artifact of the detllm engine.

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
refuses a mismatch, and refuses any floating-point tensor. Both
``save_artifact`` and ``load_artifact`` check the tensor set against the
schema implied by the config (``expected_tensors``: every tensor present, no
extra one, exact dtype and shape), so a re-sealed artifact with a removed,
retyped, reshaped or added tensor fails at load with one line, not deep in
the forward.
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
            raise CheckpointError(f"{where}: tensor {name!r} has dtype {t.dtype} (the artifact must be integer-only)")


# --------------------------------------------------------------- the schema
#
# The exact tensor set ``detllm.prepare.prepare`` writes, derived from the
# config alone. ``load_artifact`` and ``save_artifact`` both check it, so an
# artifact the engine runs is exactly what prepare wrote (no missing, extra,
# retyped or reshaped tensor can reach the forward as a KeyError or a deep
# shape error).

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
    """The model dimensions of an artifact config (``config["model"]``), checked.

    Returns:
        {field: int} for ``MODEL_FIELDS`` (hidden size H, layers L, heads nh,
        kv_heads nkv, head_dim hd, intermediate I, vocab V, max_position P).
    Raises:
        CheckpointError: a field missing or not a positive integer, heads not
            a multiple of kv_heads, odd head_dim (one line naming ``where``).
    """
    m = config.get("model") if isinstance(config, Mapping) else None
    if not isinstance(m, Mapping):
        raise CheckpointError(f"{where}: config field 'model' is missing or not an object")
    d = {k: _int_field(m, k, where, f"model.{k}", positive=True) for k in MODEL_FIELDS}
    if d["heads"] % d["kv_heads"] or d["head_dim"] % 2:
        raise CheckpointError(
            f"{where}: config model.heads={d['heads']} is not a multiple of "
            f"model.kv_heads={d['kv_heads']} or model.head_dim={d['head_dim']} is odd"
        )
    return d


def expected_tensors(config: Mapping, where: str = "artifact") -> dict:
    """The declarative artifact schema: config -> {name: (dtype, shape)}.

    Exactly the tensors ``detllm.prepare.prepare`` writes (and the engine
    reads), with H = hidden, nh = heads, nkv = kv_heads, hd = head_dim,
    I = intermediate, V = vocab, P = max_position, for each layer i < L::

        layers.i.attn_norm.g  int32 [H]        layers.i.mlp_norm.g  int32 [H]
        layers.i.qkv.w        int8  [(nh+2nkv)hd, H]   .m/.k int64 [(nh+2nkv)hd]
        layers.i.q_norm.g     int32 [nh, hd]   layers.i.k_norm.g    int32 [nkv, hd]
        layers.i.k_cache.m/k  int64 [nkv]      layers.i.score.m/k   int64 [nkv]
        layers.i.o.w          int8  [H, nh hd]         .m/.k int64 [H]
        layers.i.gate_up.w    int8  [2I, H]            .m/.k int64 [2I]
        layers.i.down.w       int8  [H, I]             .m/.k int64 [H]
    and ``embed`` int32 [V, H] (residual units), ``final_norm.g`` int32 [H],
    ``lm_head.w`` int8 [V, H], ``lm_head.m/k`` int64 [V], ``rope.cos/sin``
    int16 [P, hd] (Q14). dtypes: int8 weights (``prepare.quantize_rows``),
    int64 dyadic mantissas/shifts (``intops.fit_dyadic_per_channel``), int32
    norm multipliers (``prepare._norm_mult``), int16 RoPE tables
    (``ops.build_rope_tables``).

    Raises:
        CheckpointError: bad model dims (see ``model_dims``).
    """
    d = model_dims(config, where)
    H, nh, nkv, hd = d["hidden"], d["heads"], d["kv_heads"], d["head_dim"]
    I, V, P = d["intermediate"], d["vocab"], d["max_position"]
    out: dict = {}

    def lin(name: str, n: int, k: int) -> None:
        out[name + ".w"] = (_I8, (n, k))
        out[name + ".m"] = (_I64, (n,))
        out[name + ".k"] = (_I64, (n,))

    for i in range(d["layers"]):
        p = f"layers.{i}."
        out[p + "attn_norm.g"] = (_I32, (H,))
        lin(p + "qkv", (nh + 2 * nkv) * hd, H)
        out[p + "q_norm.g"] = (_I32, (nh, hd))
        out[p + "k_norm.g"] = (_I32, (nkv, hd))
        for n in ("k_cache", "score"):
            out[p + n + ".m"] = (_I64, (nkv,))
            out[p + n + ".k"] = (_I64, (nkv,))
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
    """Raise CheckpointError (one line) unless ``tensors`` is exactly ``expected_tensors(config)``.

    Also checks the config fields the engine reads: ``units`` (``UNIT_FIELDS``)
    and one ``layers`` entry per model layer with ``LAYER_FIELDS``, all integers.

    Args:
        config: artifact config (``detllm.json``).
        tensors: name -> tensor.
        where: the artifact path (named in the message as ``artifact <where>``).
    Raises:
        CheckpointError: e.g. ``artifact /x: tensor 'layers.0.down.w' has
            dtype int16, expected int8``; ``... tensor 'embed' is missing
            (expected int32 [4096, 384])``; ``... has shape [11, 1536],
            expected [384, 1536]``; ``... unexpected tensor 'x' ...``.
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
            f"{w}: unexpected tensor {extra[0]!r} ({got}); an artifact holds exactly "
            f"the tensors `detllm prepare` writes{more}"
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
    """sha256 hex over the canonical config (without ``digest``) and the
    tensors file's sha256 (hex)."""
    h = hashlib.sha256()
    h.update(_canonical(config))
    h.update(tensors_sha256.encode("ascii"))
    return h.hexdigest()


def save_artifact(out_dir, config: dict, tensors: Mapping[str, torch.Tensor]) -> Artifact:
    """Write an artifact directory atomically (each file via temp + os.replace).

    Args:
        out_dir: directory (created if missing).
        config: JSON-able dict (dims, shifts, provenance). ``format``,
            ``tensors_sha256`` and ``digest`` are filled in here.
        tensors: name -> integer tensor (asserted: no float tensor is written;
            exactly ``expected_tensors(config)``, checked before writing).
    Returns:
        The Artifact (tensors as given, contiguous CPU).
    Raises:
        CheckpointError: a non-integer tensor, or tensors / config not
            matching the schema (``check_schema``).
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
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    cfg = dict(config)
    cfg["format"] = FORMAT
    cfg["tensors_sha256"] = sha
    cfg.pop("digest", None)
    cfg["digest"] = artifact_digest(cfg, sha)
    atomic_write_json(out / CONFIG_FILE, cfg, indent=1, ensure_ascii=True)
    return Artifact(config=cfg, tensors=cpu, digest=cfg["digest"], path=out)


def is_artifact_dir(path) -> bool:
    """True if ``path`` holds ``detllm.json`` and ``detllm.safetensors``. Never raises."""
    p = Path(path)
    return (p / CONFIG_FILE).is_file() and (p / TENSORS_FILE).is_file()


def load_artifact(path, expect_digest: Optional[str] = None) -> Artifact:
    """Load and verify an artifact directory.

    Checks, in order: both files exist; the config is JSON with
    ``format == detllm-artifact-v1``; the fields ``tensors_sha256`` and
    ``digest`` are present (strings); the tensors file's sha256 equals
    ``tensors_sha256``; the recomputed digest equals ``digest`` (and
    ``expect_digest`` if given, full or a prefix of >= 12 hex digits); every
    tensor is an integer dtype; the tensors are exactly the schema of the
    config (``check_schema``: names, dtypes, shapes; config fields the
    engine reads).

    Returns:
        Artifact with CPU tensors.
    Raises:
        CheckpointError: one line naming the file and the failed check.
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
            raise CheckpointError(
                f"{cfg_path}: field {key!r} is "
                f"{'missing' if key not in cfg else 'not a string'} "
                f"(re-run `detllm prepare`)"
            )
    sha = file_sha256(ten_path)
    if sha != cfg.get("tensors_sha256"):
        raise CheckpointError(
            f"{ten_path}: sha256 {sha[:12]} does not match tensors_sha256 "
            f"{str(cfg.get('tensors_sha256'))[:12]} in {CONFIG_FILE}"
        )
    dig = artifact_digest(cfg, sha)
    if dig != cfg.get("digest"):
        raise CheckpointError(
            f"{cfg_path}: artifact digest {dig[:12]} does not match the recorded "
            f"digest {str(cfg.get('digest'))[:12]} (config edited?)"
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
