"""compressed-tensors W8A8 checkpoints, in the layout vLLM serves.

Every decoder linear holds ``<name>.weight`` int8 ``[N, K]`` and ``<name>.weight_scale`` ``[N, 1]`` in the parent dtype
(symmetric; dequantized = ``weight * weight_scale``); other tensors are the parent's. ``config.json`` adds
:func:`w8a8_quantization_config` (llm-compressor's W8A8 INT8 field set) and our ``int8conf`` record. The reader also
takes other tools' variants (``compression_config``, ``naive-quantized``, ``[N]`` or fp16 / fp32 scales, zero
``weight_zero_point``); anything but 8-bit symmetric per-channel integer weights is a one-line CheckpointError."""

from __future__ import annotations

import copy
import functools
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

import torch

from reference import memo
from reference.errors import CheckpointError, OperandError, first_line
from reference.model.checkpoint import (
    CONFIG_FILE,
    INDEX_FILE,
    SINGLE_FILE,
    check_qwen3_state,
    copy_side_files,
    linear_names,
    linear_shapes,
    load_qwen3_state,
    read_config,
    save_safetensors_atomic,
    state_digest,
    write_json_atomic,
)
from reference.quantize import quantize_weight_per_channel

QUANTIZER_NAME = "reference.quantize.quantize_weight_per_channel"
SUPPORTED_FORMATS = ("int-quantized", "naive-quantized")

# A weight quantizer: w [N, K] float -> (q int8 [N, K], scale [N, 1]).
Quantizer = Callable[[torch.Tensor], tuple]


def w8a8_quantization_config() -> dict:
    """The ``quantization_config`` block: int8 per-channel static weights, dynamic per-token int8 activations."""

    def scheme(**kw) -> dict:
        base = {"actorder": None, "block_structure": None, "group_size": None, "num_bits": 8}
        return {**base, "observer_kwargs": {}, "symmetric": True, "type": "int", **kw}

    group = {"input_activations": scheme(dynamic=True, observer=None, strategy="token"), "output_activations": None}
    group |= {"targets": ["Linear"], "weights": scheme(dynamic=False, observer="minmax", strategy="channel")}
    qc = {"config_groups": {"group_0": group}, "format": "int-quantized", "global_compression_ratio": None}
    qc |= {"ignore": ["lm_head"], "kv_cache_scheme": None, "quant_method": "compressed-tensors"}
    return qc | {"quantization_status": "compressed"}


@dataclass
class W8A8Checkpoint:
    """A loaded W8A8 checkpoint: ``weights`` int8 [N, K] and ``scales`` as stored per quantized linear, ``others`` the
    remaining tensors, ``activation_scheme`` (None: weight-only), ``digest`` (:func:`state_digest`), ``meta`` our
    ``int8conf`` record ({} otherwise)."""

    dir: Path
    config: dict
    quantization_config: dict
    weights: dict
    scales: dict
    others: dict = field(default_factory=dict)
    activation_scheme: Optional[dict] = None
    digest: str = ""
    meta: dict = field(default_factory=dict)

    def layer_names(self) -> list[str]:
        """Quantized linear names in forward order."""
        return [n for n in linear_names(self.config) if n in self.weights]

    def weight(self, name: str) -> torch.Tensor:
        """int8 [N, K] weight of ``name`` (CheckpointError if absent)."""
        if name not in self.weights:
            raise CheckpointError(f"{self.dir}: layer {name!r} is not quantized in this checkpoint")
        return self.weights[name]

    def scale_b(self, name: str) -> torch.Tensor:
        """Scale of ``name`` as float32 [N] (exact widening); CheckpointError if absent."""
        if name not in self.scales:
            raise CheckpointError(f"{self.dir}: layer {name!r} has no weight_scale")
        return self.scales[name].reshape(-1).to(torch.float32).contiguous()

    def tensors(self) -> dict:
        """Every stored tensor by its checkpoint name."""
        out = dict(self.others)
        for n in self.weights:
            out[f"{n}.weight"] = self.weights[n]
            out[f"{n}.weight_scale"] = self.scales[n]
        return out


def quantize_state_w8a8(
    config: Mapping, state: Mapping[str, torch.Tensor], quantizer: Optional[Quantizer] = None, device="cpu"
) -> dict[str, torch.Tensor]:
    """Tensors (CPU) of the W8A8 child of a parent state: ``<layer>.weight`` int8 and ``<layer>.weight_scale``
    ``[N, 1]`` from ``quantizer`` (default :func:`reference.quantize.quantize_weight_per_channel`), other tensors
    unchanged. ``device``: where ``quantizer`` runs, each weight copied there (or its copy kept in the open memo
    scope: ``memo.moved_if_kept``; ``quantizer`` must not write into its input; the reference quantizers are
    element-wise IEEE operations and exact exponent arithmetic: every device gives these bytes)."""
    quantizer = quantizer or quantize_weight_per_channel
    out: dict[str, torch.Tensor] = {}
    layers = set(linear_names(config))
    for name, t in state.items():
        base = name[: -len(".weight")] if name.endswith(".weight") else None
        if base in layers:
            try:
                q, s = quantizer(memo.moved_if_kept(t, device))
            except OperandError as e:  # e.g. a NaN weight: name the tensor, not "w"
                raise OperandError(f"tensor {name}: {first_line(e)}") from None
            out[f"{base}.weight"] = q.cpu().contiguous()
            out[f"{base}.weight_scale"] = s.cpu().reshape(-1, 1).contiguous()
        else:
            out[name] = t
    return out


def write_checkpoint_dir(
    out_dir,
    config: Mapping,
    tensors: Mapping[str, torch.Tensor],
    side_files_from=None,
    quantization_config: Optional[dict] = None,
    int8conf_meta: Optional[dict] = None,
) -> Path:
    """Write a checkpoint directory atomically (a sibling renamed into place) and return it; ``int8conf_meta`` becomes
    ``config["int8conf"]``. CheckpointError if ``out_dir`` exists and is neither empty nor a checkpoint directory."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / CONFIG_FILE).is_file())):
        raise CheckpointError(f"{out}: exists and is not a checkpoint directory; refusing to overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        cfg = copy.deepcopy(dict(config))
        if quantization_config is not None:
            cfg["quantization_config"] = quantization_config
        if int8conf_meta is not None:
            cfg["int8conf"] = int8conf_meta
        save_safetensors_atomic(tensors, tmp / SINGLE_FILE)
        write_json_atomic(cfg, tmp / CONFIG_FILE)
        if side_files_from is not None:
            copy_side_files(side_files_from, tmp)
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old.{os.getpid()}"
            os.replace(out, old)
        try:
            os.replace(tmp, out)
        except OSError:
            # another process put a checkpoint there in between (same inputs give the same bytes); keep theirs
            if not (out / CONFIG_FILE).is_file():
                raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def write_w8a8_dir(parent_dir, out_dir, config: Mapping, tensors: Mapping, meta: dict) -> W8A8Checkpoint:
    """Write ``tensors`` as a W8A8 child of ``parent_dir`` and return what :func:`read_w8a8_checkpoint` of it gives,
    built from ``tensors`` themselves (shared, not copied) and the ``config.json`` written, with the same checks."""
    out = write_checkpoint_dir(out_dir, config, tensors, parent_dir, w8a8_quantization_config(), meta)
    state = {k: v.contiguous() for k, v in tensors.items()}  # as written (save_safetensors_atomic)
    cfg = read_config(out)
    check_qwen3_state(cfg, state, out / SINGLE_FILE)
    return _w8a8_from_state(out, cfg, state)


def build_w8a8_checkpoint(
    parent_dir, out_dir, quantizer: Optional[Quantizer] = None, parent: Optional[tuple] = None, device="cpu"
) -> W8A8Checkpoint:
    """The committed checkpoint (DESIGN.md 5): a float parent quantized with own per-channel scales, written to
    ``out_dir`` (:func:`write_w8a8_dir`). ``parent``: pre-loaded ``(config, state)`` or ``(config, state, digest)``
    (:func:`parent_with_digest`); ``device``: where the quantizer runs
    (:func:`quantize_state_w8a8`: the same bytes). CheckpointError: bad or quantized parent."""
    config, state, pdigest = parent_with_digest(parent_dir, parent)
    if "quantization_config" in config or "compression_config" in config:
        raise CheckpointError(
            f"{Path(parent_dir) / CONFIG_FILE}: already quantized "
            f"(has quantization_config); quantize the float parent instead"
        )
    with memo.scope():  # each built tensor hashed once (meta, then the returned checkpoint)
        tensors = quantize_state_w8a8(config, state, quantizer, device)
        meta = {"scale_rule": "own", "parent_digest": pdigest(), "state_digest": state_digest(tensors)}
        meta["quantizer"] = QUANTIZER_NAME if quantizer is None else getattr(quantizer, "__name__", "custom")
        return write_w8a8_dir(parent_dir, out_dir, config, tensors, meta)


def parent_with_digest(parent_dir, parent: Optional[tuple] = None) -> tuple:
    """``(config, state, digest())`` of a parent: ``parent`` (``(config, state)`` or ``load_parent``'s
    ``(config, state, digest)``: not hashed again) or :func:`load_qwen3_state` of ``parent_dir``; ``digest()`` gives
    :func:`state_digest` of ``state``, computed at most once."""
    if parent is not None and len(parent) == 3:
        config, state, known = parent
        return config, state, lambda: known
    config, state = parent if parent is not None else load_qwen3_state(parent_dir)
    return config, state, functools.lru_cache(maxsize=1)(lambda: state_digest(state))


def _check_group(qc_path: str, gname: str, group: Mapping) -> Optional[dict]:
    w = group.get("weights")
    if not isinstance(w, Mapping):
        raise CheckpointError(f"{qc_path}: config_groups.{gname}.weights missing (not a weight-quantized scheme)")
    want = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
    for key, val in want.items():
        if w.get(key) != val:
            raise CheckpointError(
                f"{qc_path}: config_groups.{gname}.weights.{key}={w.get(key)!r} "
                f"(supported: {val!r}, i.e. int8 symmetric per-channel weights)"
            )
    fmt = group.get("format")
    if fmt is not None and fmt not in SUPPORTED_FORMATS:
        raise CheckpointError(f"{qc_path}: config_groups.{gname}.format={fmt!r} (supported: {SUPPORTED_FORMATS})")
    acts = group.get("input_activations")
    return dict(acts) if isinstance(acts, Mapping) else None


def read_w8a8_checkpoint(model_dir) -> W8A8Checkpoint:
    """Load a compressed-tensors W8A8 Qwen3 checkpoint (ours or another tool's).

    CheckpointError: as :func:`load_qwen3_state`; no ``quantization_config``; a method, format or weight scheme other
    than compressed-tensors int8 symmetric per-channel; a linear without ``weight_scale``; a weight not int8 (or
    integral in [-128, 127]); a scale of the wrong size or not finite and positive; a non-zero ``weight_zero_point``."""
    d = Path(model_dir)
    config, state = load_qwen3_state(d)
    return _w8a8_from_state(d, config, state)


def _w8a8_from_state(d: Path, config: dict, state: Mapping[str, torch.Tensor]) -> W8A8Checkpoint:
    """The :class:`W8A8Checkpoint` of a Qwen3 state (tensors already checked) in directory ``d`` with ``config``:
    the W8A8 checks of :func:`read_w8a8_checkpoint`."""
    cfg_path = f"{d / CONFIG_FILE}"
    qc = config.get("quantization_config") or config.get("compression_config")
    if not isinstance(qc, Mapping):
        raise CheckpointError(f"{cfg_path}: no quantization_config (a float checkpoint, not W8A8 compressed-tensors)")
    if qc.get("quant_method") != "compressed-tensors":
        raise CheckpointError(
            f"{cfg_path}: quantization_config.quant_method={qc.get('quant_method')!r} (expected 'compressed-tensors')"
        )
    fmt = qc.get("format")
    if fmt is not None and fmt not in SUPPORTED_FORMATS and fmt != "mixed-precision":
        raise CheckpointError(f"{cfg_path}: quantization_config.format={fmt!r} (supported: {SUPPORTED_FORMATS})")
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise CheckpointError(f"{cfg_path}: quantization_config.config_groups missing or empty")
    act_scheme = None
    for gname, group in groups.items():
        act_scheme = _check_group(f"{cfg_path}: quantization_config", gname, group) or act_scheme

    where = d / (INDEX_FILE if (d / INDEX_FILE).is_file() else SINGLE_FILE)
    shapes = linear_shapes(config)
    weights, scales, consumed = {}, {}, set()
    for name in linear_names(config):
        w = state[f"{name}.weight"]
        sname = f"{name}.weight_scale"
        if sname not in state:
            if w.is_floating_point():
                continue  # left unquantized by the producing tool (e.g. in its ignore list)
            raise CheckpointError(f"{where}: missing tensor {sname!r} for int8 weight {name}.weight")
        n, _ = shapes[name]
        if w.dtype != torch.int8:
            integral = w.is_floating_point() and bool(torch.all(w == w.round()))
            if not integral or float(w.min()) < -128 or float(w.max()) > 127:
                raise CheckpointError(
                    f"{where}: tensor {name}.weight has dtype {w.dtype} "
                    f"(expected int8 or integral values in [-128, 127])"
                )
            w = w.to(torch.int8)
        s = state[sname]
        if not s.is_floating_point() or s.numel() != n or tuple(s.shape) not in ((n, 1), (n,)):
            raise CheckpointError(
                f"{where}: tensor {sname!r} has shape {list(s.shape)} dtype {s.dtype} "
                f"(expected float [{n}, 1] or [{n}])"
            )
        if not bool(torch.all(torch.isfinite(s) & (s > 0))):
            raise CheckpointError(f"{where}: tensor {sname!r} has non-finite or non-positive entries")
        zp = state.get(f"{name}.weight_zero_point")
        if zp is not None and bool(torch.any(zp != 0)):
            raise CheckpointError(
                f"{where}: tensor {name}.weight_zero_point is non-zero (asymmetric weights are not supported)"
            )
        weights[name], scales[name] = w.contiguous(), s
        consumed |= {f"{name}.weight", sname, f"{name}.weight_zero_point"}
    if not weights:
        raise CheckpointError(f"{where}: no int8 linear weights with weight_scale found")
    others = {k: v for k, v in state.items() if k not in consumed}
    meta = dict(config.get("int8conf") or {})
    return W8A8Checkpoint(d, config, dict(qc), weights, scales, others, act_scheme, state_digest(state), meta)
