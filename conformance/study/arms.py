"""The model arms of the power-of-two study: one Qwen3 model, bf16 or W8A8 through a kernel under one weight arm.

Weight arms, all built from the float parent: ``own`` (the committed checkpoint's int8 weights and scales: the
reference quantizer's, which the reconstruction gate proves byte-identical, or ``--committed DIR``'s tensors);
``pow2-nearest`` / ``pow2-ceiling`` (requantized with power-of-two scales); ``wrong`` (own int8 weights, scales
snapped to the nearest power of two without requantizing: fault F9, the accuracy decomposition's control).
Kernels run on the chosen device; every other op (embedding, norms, attention, bf16 ``lm_head``) on the CPU in bf16.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from conformance.checks import token_flip
from conformance.kernels.runner import cuda_device
from reference.errors import Int8confError
from reference.model import forward as wf
from reference.model.corpus import eval_windows
from reference.model.pow2 import rewrite_scales_pow2_without_requant
from reference.model.tokenizer import load_tokenizer
from reference.model.weights import checkpoint_weights

WEIGHT_ARMS = ("own", "pow2-nearest", "pow2-ceiling", "wrong")


@dataclass
class StudyContext:
    """What every part of the study shares: the float parent, the two ``KernelSpec`` (A, B), where the kernels
    run (``"cpu"``, ``"cuda"``, None: the runner's default), the committed checkpoint (None: the reference
    quantizer's, rebuilt on demand) and the artifact cache override. Models, weights and replays are memoized."""

    model_dir: Path
    kernels: tuple
    device: Optional[str] = None
    committed_dir: Optional[Path] = None
    cache: Optional[Path] = None
    _base: object = field(default=None, repr=False)
    _weights: dict = field(default_factory=dict, repr=False)
    _tokenizer: object = field(default=None, repr=False)
    _tf: dict = field(default_factory=dict, repr=False)

    @property
    def base(self):
        """The bf16 ``Qwen3ForCausalLM``."""
        if self._base is None:
            self._base = wf.load_model(self.model_dir)
        return self._base

    @property
    def work_device(self) -> str:
        """Where the study builds its captures and derived checkpoints: the first CUDA device a
        kernel runs on (``runner.cuda_device``), else ``"cpu"`` (the same bytes on any device)."""
        return next((d for d in (cuda_device(k, self.device) for k in self.kernels) if d), "cpu")

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.model_dir)
        return self._tokenizer

    def weights(self, arm: str) -> dict:
        """``{layer: QuantWeight}`` of a weight arm. Raises Int8confError (unknown arm), CheckpointError."""
        if arm not in WEIGHT_ARMS:
            raise Int8confError(f"weight arm {arm!r} is not one of {WEIGHT_ARMS}")
        if arm not in self._weights:
            if arm == "own" and self.committed_dir is not None:
                self._weights[arm] = checkpoint_weights(self.base, self.committed_dir)[0]
            elif arm == "wrong":
                self._weights[arm] = {
                    n: wf.as_quant_weight(
                        *rewrite_scales_pow2_without_requant(w.q, w.scale, "nearest"), bias=w.bias, name=n
                    )
                    for n, w in self.weights("own").items()
                }
            else:
                self._weights[arm] = wf.weights_for_scale_mode(self.base, arm)
        return self._weights[arm]

    def model(self, kernel, arm: str, wrap=None):
        """``(model, first-call kernel manifest)``: bf16 (``arm == "bf16"``, kernel ignored) or W8A8 with ``arm``'s
        weights through ``kernel``; ``wrap`` maps ``{layer: scaled_mm}`` to new callables (e.g. ``Lockstep.wrap_all``)."""
        if arm == "bf16":
            return self.base, {}
        names = wf.linear_names(self.base.config.num_hidden_layers)
        man: dict = {}
        kmode = arm if arm in ("own", "pow2-nearest", "pow2-ceiling") else "own"
        fns = token_flip.kernel_layer_callables(kernel, names, kmode, device=self.device, first_manifest=man)
        if wrap is not None:
            fns = wrap(fns)
        model, _ = wf.build_w8a8_model(self.base, self.weights(arm), fns)
        return model, man

    def teacher_forced(self, kernel, arm: str, windows, batch_size: int = 8):
        """``reference.model.forward.TeacherForced`` of ``windows`` (int64 [W, T]) through one arm, memoized per
        (kernel, arm, windows digest)."""
        digest = hashlib.sha256(windows.contiguous().numpy().tobytes()).hexdigest()
        key = (None if arm == "bf16" else kernel.name, arm, digest, tuple(windows.shape))
        if key not in self._tf:
            self._tf[key] = wf.teacher_forced(self.model(kernel, arm)[0], windows, batch_size)
        return self._tf[key]

    def windows(self, n: int, length: int):
        """``n`` held-out windows of ``length`` tokens, checked against the model's context."""
        wf.check_context(length, self.base.config, f"--window-len {length}")
        return eval_windows(self.tokenizer, n, length)


def kernel_record(spec, manifest: Optional[dict] = None) -> dict:
    """JSON-able kernel description: name, declared contract, devices, version / digest, and the path it took
    (from a run manifest)."""
    man = manifest or {}
    return {
        "name": spec.name,
        "contract": spec.contract.label(),
        "scale_order": spec.contract.scale_order,
        "devices": list(spec.devices),
        "version": getattr(spec, "version", None),
        "source_digest": (getattr(spec, "source_digest", None) or "")[:16] or None,
        "path": man.get("path"),
        "device": man.get("device"),
    }
