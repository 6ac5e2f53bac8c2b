"""The one environment record: versions, interpreter, machine and accelerator of this process.
Reports add their own keys (devices used, execution mode ...) on top."""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import platform
import sys
from typing import Optional

import torch

#: Optional kernel libraries whose installed versions are recorded (distribution names).
LIBRARIES = (
    "torchao",
    "bitsandbytes",
    "triton",
    "vllm",
    "sgl-kernel",
    "flag-gems",
    "gemlite",
    "fbgemm-gpu-genai",
    "nvidia-cutlass",
)


def _version(mod: str) -> Optional[str]:
    """``mod.__version__`` if loaded, else its distribution's version (importing hypothesis or triton
    only to read it costs a second), else ``mod.__version__`` after all; None if not installed."""
    loaded = sys.modules.get(mod)
    if loaded is None and (v := _distribution(mod)) is not None:
        return v
    try:
        return getattr(loaded or importlib.import_module(mod), "__version__", None)
    except Exception:  # noqa: BLE001 -- optional package missing or broken
        return None


def _record_hash(name: str) -> Optional[str]:
    """SHA-256 of the installed distribution's ``RECORD`` (which lists every installed file with its own SHA-256):
    one hash naming exactly what was installed; None when absent."""
    try:
        record = importlib.metadata.distribution(name).read_text("RECORD")
    except Exception:  # noqa: BLE001 -- not installed as a distribution
        return None
    return None if record is None else hashlib.sha256(record.encode()).hexdigest()


def _distribution(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except Exception:  # noqa: BLE001 -- not installed as a distribution
        return None


def environment() -> dict:
    """JSON-able: ``python, platform, machine, cpu_count, torch,
    triton, hypothesis, numpy, int8conf`` (None: not installed), ``cuda_available, cuda_device`` (None
    without CUDA), ``triton_interpret_env``, ``libraries`` {distribution: version} of :data:`LIBRARIES`,
    ``library_record_sha256`` {distribution: SHA-256 of its installed RECORD} for those but triton."""
    cuda = torch.cuda.is_available()
    libs = {d: v for d in LIBRARIES if (v := _distribution(d)) is not None}
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "hypothesis": _version("hypothesis"),
        "numpy": _version("numpy"),
        "int8conf": _distribution("int8conf"),
        "cuda_available": cuda,
        "cuda_device": torch.cuda.get_device_name(0) if cuda else None,
        "triton_interpret_env": os.environ.get("TRITON_INTERPRET"),
        "libraries": libs,
        "library_record_sha256": {d: h for d in libs if d != "triton" and (h := _record_hash(d)) is not None},
    }
