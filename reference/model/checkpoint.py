"""Hugging Face Qwen3 checkpoint directories: detection, loading, digests, atomic writers.

A directory holds ``config.json`` (``model_type`` ``qwen3`` / ``architectures`` ``["Qwen3ForCausalLM"]``) and its
tensors in ``model.safetensors`` or in shards listed by ``model.safetensors.index.json``. The loader reads the bf16
parent and its W8A8 compressed-tensors children alike. Every user-caused problem raises one-line
:class:`~reference.errors.CheckpointError` naming the file and the mismatch."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Mapping, Optional

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from reference.errors import CheckpointError, first_line
from reference.fileio import read_json_object
from reference.operands import tensor_digests
from reference.validate import nonfinite_summary

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
QWEN3_ARCH = "Qwen3ForCausalLM"

#: What reading a safetensors file (``load_file``, ``safe_open``, ``get_tensor``) raises for a missing, truncated or
#: malformed file: SafetensorError (header, offsets, a missing tensor), OSError, RuntimeError (torch's storage) and
#: AttributeError (a dtype this torch lacks, e.g. float8_e8m0fnu before 2.7); ValueError for JSON read beside it.
SAFETENSORS_READ_ERRORS = (SafetensorError, OSError, ValueError, RuntimeError, AttributeError)

# The 7 linears of a Qwen3 decoder block in forward order (path relative to ``model.layers.{i}``).
BLOCK_LINEARS = tuple(f"self_attn.{p}_proj" for p in "qkvo") + tuple(f"mlp.{p}_proj" for p in ("gate", "up", "down"))

# Files copied next to a derived checkpoint so that it is servable as is.
SIDE_FILES = tuple(
    "tokenizer.json tokenizer_config.json special_tokens_map.json generation_config.json vocab.json merges.txt".split()
)


def read_config(model_dir) -> dict:
    """``config.json`` of a dense Qwen3 checkpoint directory. CheckpointError: directory or file missing, invalid JSON,
    not Qwen3 (``qwen3_moe`` included), a size field not a positive int."""
    d = Path(model_dir)
    if not d.is_dir():
        raise CheckpointError(f"{d}: not a directory (expected a Hugging Face Qwen3 checkpoint)")
    path = d / CONFIG_FILE
    config = read_json_object(path, CheckpointError, "not a Hugging Face checkpoint directory")
    model_type = config.get("model_type")
    archs = config.get("architectures") or []
    if model_type != "qwen3" and QWEN3_ARCH not in archs:
        raise CheckpointError(
            f"{path}: not a Qwen3 checkpoint (model_type={model_type!r}, architectures={archs!r}; "
            f"expected model_type 'qwen3' / {QWEN3_ARCH!r})"
        )
    if model_type not in (None, "qwen3"):
        raise CheckpointError(f"{path}: model_type={model_type!r} contradicts architectures={archs!r}")
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise CheckpointError(f"{path}: field {key!r} missing or not a positive integer")
    return config


def is_qwen3_dir(model_dir) -> bool:
    """True if ``model_dir`` has a Qwen3 ``config.json`` and a safetensors weight file; never raises."""
    try:
        read_config(model_dir)
    except CheckpointError:
        return False
    d = Path(model_dir)
    return (d / SINGLE_FILE).is_file() or (d / INDEX_FILE).is_file()


def head_dim(config: Mapping) -> int:
    """``head_dim``, or ``hidden_size // num_attention_heads``."""
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def linear_names(config: Mapping) -> list[str]:
    """The 7 x ``num_hidden_layers`` linear names in forward order, e.g. ``model.layers.0.self_attn.q_proj``."""
    return [f"model.layers.{i}.{p}" for i in range(int(config["num_hidden_layers"])) for p in BLOCK_LINEARS]


def linear_shapes(config: Mapping) -> dict[str, tuple[int, int]]:
    """``{layer name: (N, K)}`` (nn.Linear weight layout) implied by a Qwen3 config."""
    h, inter = int(config["hidden_size"]), int(config["intermediate_size"])
    hd = head_dim(config)
    nq = int(config["num_attention_heads"]) * hd
    nkv = int(config.get("num_key_value_heads") or config["num_attention_heads"]) * hd
    per = dict(zip(BLOCK_LINEARS, [(nq, h), (nkv, h), (nkv, h), (h, nq), (inter, h), (inter, h), (h, inter)]))
    return {name: per[name.split(".", 3)[3]] for name in linear_names(config)}


def layer_block_proj(name: str) -> tuple[int, str]:
    """``model.layers.3.mlp.up_proj`` -> ``(3, "up_proj")``; CheckpointError for other names."""
    m = re.fullmatch(r"model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)", name)
    if not m:
        raise CheckpointError(f"not a Qwen3 block linear name: {name!r}")
    return int(m.group(1)), m.group(3)


def required_tensors(config: Mapping) -> dict[str, Optional[tuple[int, ...]]]:
    """Tensor names every Qwen3 checkpoint must hold, with their shapes (linear weights [N, K], bf16 or int8)."""
    h = int(config["hidden_size"])
    hd = head_dim(config)
    req: dict[str, Optional[tuple[int, ...]]] = {
        "model.embed_tokens.weight": (int(config["vocab_size"]), h),
        "model.norm.weight": (h,),
    }
    for name, (n, k) in linear_shapes(config).items():
        req[f"{name}.weight"] = (n, k)
    for i in range(int(config["num_hidden_layers"])):
        req[f"model.layers.{i}.input_layernorm.weight"] = (h,)
        req[f"model.layers.{i}.post_attention_layernorm.weight"] = (h,)
        req[f"model.layers.{i}.self_attn.q_norm.weight"] = (hd,)
        req[f"model.layers.{i}.self_attn.k_norm.weight"] = (hd,)
    if not config.get("tie_word_embeddings", False):
        req["lm_head.weight"] = (int(config["vocab_size"]), h)
    return req


def _safetensors_expected_size(path: Path) -> Optional[int]:
    """Byte size a safetensors file's header declares (None if the header is unreadable)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                return None
            n = struct.unpack("<Q", raw)[0]
            if n > 100_000_000:
                return None
            header = json.loads(f.read(n))
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
        return 8 + n + (max(ends) if ends else 0)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def load_safetensors_file(path) -> dict[str, torch.Tensor]:
    """All tensors of one safetensors file (CPU). CheckpointError: missing, truncated or unreadable."""
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"{p}: safetensors file missing")
    size = p.stat().st_size
    expected = _safetensors_expected_size(p)
    if expected is None:
        raise CheckpointError(
            f"{p}: not a readable safetensors file (header unreadable; file has {size} bytes, may be truncated)"
        )
    if size < expected:
        raise CheckpointError(f"{p}: truncated safetensors file ({size} bytes, header declares {expected})")
    try:
        return load_file(str(p), device="cpu")
    except SAFETENSORS_READ_ERRORS as exc:
        msg = first_line(exc, None) or type(exc).__name__
        raise CheckpointError(f"{p}: not a readable safetensors file ({msg})") from None


def _read_index(path: Path) -> dict[str, str]:
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
        wm = index["weight_map"]
        if not isinstance(wm, dict):
            raise TypeError
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{path}: not valid JSON") from None
    except (KeyError, TypeError):
        raise CheckpointError(f"{path}: field 'weight_map' missing or not an object") from None
    return {str(k): str(v) for k, v in wm.items()}


def load_qwen3_state(model_dir) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(config, {tensor name: CPU tensor as stored})`` of a Qwen3 checkpoint (single file or index shards).
    CheckpointError: not Qwen3; a weight file missing, truncated or unreadable; a tensor missing from its shard,
    required but missing or misshapen, or non-finite."""
    d = Path(model_dir)
    config = read_config(d)
    state: dict[str, torch.Tensor] = {}
    origin: dict[str, Path] = {}
    if (d / INDEX_FILE).is_file():
        wm = _read_index(d / INDEX_FILE)
        for shard in sorted(set(wm.values())):
            for name, t in load_safetensors_file(d / shard).items():
                state[name] = t
                origin[name] = d / shard
        for name, shard in wm.items():
            if name not in state:
                raise CheckpointError(f"{d / shard}: missing tensor {name!r} (listed in {INDEX_FILE})")
        where = d / INDEX_FILE
    elif (d / SINGLE_FILE).is_file():
        state = load_safetensors_file(d / SINGLE_FILE)
        origin = {n: d / SINGLE_FILE for n in state}
        where = d / SINGLE_FILE
    else:
        raise CheckpointError(f"{d}: no {SINGLE_FILE} or {INDEX_FILE} (not a safetensors checkpoint)")
    check_qwen3_state(config, state, where, origin)
    return config, state


def check_qwen3_state(
    config: Mapping, state: Mapping[str, torch.Tensor], where: Path, origin: Optional[Mapping[str, Path]] = None
) -> None:
    """The tensor checks of :func:`load_qwen3_state` on a state in memory: CheckpointError naming ``where`` (or the
    tensor's file in ``origin``) for a required tensor missing or misshapen, or a non-finite float tensor."""
    origin = origin or {}
    for name, shape in required_tensors(config).items():
        if name not in state:
            raise CheckpointError(f"{where}: missing tensor {name!r} required by {where.parent / CONFIG_FILE}")
        if shape is not None and tuple(state[name].shape) != shape:
            raise CheckpointError(
                f"{origin.get(name, where)}: tensor {name!r} has shape {list(state[name].shape)}, "
                f"config implies {list(shape)}"
            )
    for name, t in state.items():  # a NaN / inf weight would surface later as an anonymous activation error
        bad = nonfinite_summary(t) if t.is_floating_point() else None
        if bad is not None:
            raise CheckpointError(f"{origin.get(name, where)}: tensor {name!r} has {bad}")


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 hex over every ``(name, tensor_digest)`` in name order: a checkpoint's content identity, independent of
    file layout and sharding."""
    names = sorted(state)
    h = hashlib.sha256()
    for name, d in zip(names, tensor_digests([state[n] for n in names])):
        h.update(f"{name}={d};".encode("ascii"))
    return h.hexdigest()


def _write_atomic(path, write) -> None:
    """``write(temp path)`` in the destination directory, then ``os.replace`` onto ``path``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_safetensors_atomic(tensors: Mapping[str, torch.Tensor], path, metadata: Optional[dict] = None) -> None:
    """Write a safetensors file atomically (tensors made contiguous; equal inputs give equal bytes)."""
    data = {k: v.contiguous() for k, v in sorted(tensors.items())}
    _write_atomic(path, lambda tmp: save_file(data, tmp, metadata=dict(metadata or {"format": "pt"})))


def write_json_atomic(obj, path) -> None:
    """Write JSON (sorted keys, indent 2, trailing newline) atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True) + "\n"
    _write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def copy_side_files(src_dir, dst_dir) -> list[str]:
    """Copy those :data:`SIDE_FILES` that exist from ``src_dir`` to ``dst_dir``; returns their names."""
    out = []
    for name in SIDE_FILES:
        src = Path(src_dir) / name
        if src.is_file():
            shutil.copyfile(src, Path(dst_dir) / name)
            out.append(name)
    return out


def random_qwen3_config(**overrides) -> dict:
    """A small Qwen3 ``config.json`` dict (vocab 512, hidden 256, 2 blocks, 4 query / 2 KV heads, head_dim 64,
    intermediate 1536, tied, bf16) with ``overrides`` applied."""
    cfg = {"architectures": [QWEN3_ARCH], "model_type": "qwen3", "vocab_size": 512, "hidden_size": 256}
    cfg |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64}
    cfg |= {"intermediate_size": 1536, "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "hidden_act": "silu"}
    cfg |= {"attention_bias": False, "max_position_embeddings": 2048}
    cfg |= {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "rope_theta": 10000.0}
    return cfg | {"use_sliding_window": False, "sliding_window": None, "dtype": "bfloat16"} | overrides


def write_random_qwen3(out_dir, seed: int = 0, shards: int = 1, **overrides) -> Path:
    """Write a deterministic random bf16 Qwen3 checkpoint (for tests) and return its dir.

    Weights ~ N(0, 0.02^2), norm gains ~ 1 + N(0, 0.1^2); ``shards > 1`` writes ``model-0000i-of-0000n.safetensors``
    plus the index (Hugging Face sharded layout)."""
    cfg = random_qwen3_config(**overrides)
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in required_tensors(cfg).items():
        t = torch.randn(shape, generator=g)  # scaled in place: the same float32 values as 1.0 + 0.1 * t, 0.02 * t
        t = t.mul_(0.1).add_(1.0) if name.endswith("norm.weight") or "layernorm" in name else t.mul_(0.02)
        state[name] = t.to(torch.bfloat16)
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    write_json_atomic(cfg, d / CONFIG_FILE)
    if shards <= 1:
        save_safetensors_atomic(state, d / SINGLE_FILE)
        return d
    names = sorted(state)
    weight_map = {}
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: state[n] for n in names[i::shards]}
        save_safetensors_atomic(part, d / fname)
        weight_map.update({n: fname for n in part})
    total = sum(t.numel() * t.element_size() for t in state.values())
    write_json_atomic({"metadata": {"total_size": total}, "weight_map": weight_map}, d / INDEX_FILE)
    return d
