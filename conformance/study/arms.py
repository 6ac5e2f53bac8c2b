"""The model arms of the power-of-two study: one Qwen3 model, evaluated as
bf16 or W8A8 through a kernel under one weight arm.

Weight arms (all built from the float parent, never copied logic):

* ``own`` -- the committed checkpoint's int8 weights and per-channel scales
  (default: :func:`reference.model.forward.weights_for_scale_mode` ``own``, which
  the reconstruction gate proves byte-identical to the committed
  checkpoint; with ``--committed DIR``: that checkpoint's tensors);
* ``pow2-nearest`` / ``pow2-ceiling`` -- requantized from the parent with
  power-of-two scales (:func:`reference.model.pow2.requantize_pow2`);
* ``wrong`` -- the own int8 weights with their scales snapped to the
  nearest power of two WITHOUT requantizing
  (:func:`reference.model.pow2.rewrite_scales_pow2_without_requant`, fault F9),
  the control arm of the accuracy decomposition.

Kernels run through ``conformance.kernels.runner.run_kernel`` on the chosen
device (:func:`conformance.checks.token_flip.kernel_layer_callables`); every
other op of the model (embedding, norms, attention, the bf16 ``lm_head``)
runs on the CPU in bf16, identically in every arm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

WEIGHT_ARMS = ("own", "pow2-nearest", "pow2-ceiling", "wrong")


@dataclass
class StudyContext:
    """What every part of the study shares.

    Attributes:
        model_dir: float parent Qwen3 directory.
        kernels: the two ``KernelSpec`` (A, B).
        device: ``"cpu"`` or ``"cuda"`` (where the kernels run; None = the
            runner's default).
        committed_dir: the committed own-scale checkpoint (None: the
            reference quantizer's, rebuilt on demand).
        cache: artifact cache override.
    """

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
        """The bf16 ``Qwen3ForCausalLM`` (loaded once)."""
        if self._base is None:
            from reference.model.forward import load_model

            self._base = load_model(self.model_dir)
        return self._base

    @property
    def tokenizer(self):
        """The model's tokenizer (loaded once)."""
        if self._tokenizer is None:
            from reference.model.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.model_dir)
        return self._tokenizer

    def weights(self, arm: str) -> dict:
        """``{layer: QuantWeight}`` of a weight arm (see module docstring).

        Raises:
            Int8confError: unknown arm; CheckpointError for a bad committed dir.
        """
        from reference.errors import Int8confError
        from reference.model import forward as wf

        if arm not in WEIGHT_ARMS:
            raise Int8confError(f"weight arm {arm!r} is not one of {WEIGHT_ARMS}")
        if arm not in self._weights:
            if arm == "own" and self.committed_dir is not None:
                from reference.model.weights import checkpoint_weights

                self._weights[arm] = checkpoint_weights(self.base, self.committed_dir)[0]
            elif arm == "wrong":
                from reference.model.pow2 import rewrite_scales_pow2_without_requant

                own = self.weights("own")
                self._weights[arm] = {
                    n: wf.as_quant_weight(
                        *rewrite_scales_pow2_without_requant(w.q, w.scale, "nearest"), bias=w.bias, name=n
                    )
                    for n, w in own.items()
                }
            else:
                self._weights[arm] = wf.weights_for_scale_mode(self.base, arm)
        return self._weights[arm]

    def model(self, kernel, arm: str, wrap=None):
        """The model of one arm: bf16 (``arm == "bf16"``, kernel ignored) or
        W8A8 with ``arm``'s weights through ``kernel`` on :attr:`device`.
        ``wrap``: optional ``{layer: scaled_mm} -> {layer: scaled_mm}`` applied
        to the kernel callables (e.g. ``conformance.study.lockstep.Lockstep.wrap_all``).

        Returns:
            ``(model, first-call kernel manifest dict)``.
        """
        from conformance.checks.token_flip import kernel_layer_callables
        from reference.model import forward as wf

        if arm == "bf16":
            return self.base, {}
        names = wf.linear_names(self.base.config.num_hidden_layers)
        man: dict = {}
        kmode = arm if arm in ("own", "pow2-nearest", "pow2-ceiling") else "own"
        fns = kernel_layer_callables(kernel, names, kmode, device=self.device, first_manifest=man)
        if wrap is not None:
            fns = wrap(fns)
        model, _ = wf.build_w8a8_model(self.base, self.weights(arm), fns)
        return model, man

    def teacher_forced(self, kernel, arm: str, windows, batch_size: int = 8):
        """Teacher-forced replay of ``windows`` (int64 [W, T]) through one arm
        (:func:`reference.model.forward.teacher_forced`), memoized per
        (kernel, arm, windows digest) so parts that share windows reuse it.

        Returns:
            ``reference.model.forward.TeacherForced``.
        """
        import hashlib

        from reference.model.forward import teacher_forced

        key = (
            None if arm == "bf16" else kernel.name,
            arm,
            hashlib.sha256(windows.contiguous().numpy().tobytes()).hexdigest(),
            tuple(windows.shape),
        )
        if key not in self._tf:
            model, _ = self.model(kernel, arm)
            self._tf[key] = teacher_forced(model, windows, batch_size)
        return self._tf[key]

    def windows(self, n: int, length: int):
        """``n`` held-out evaluation windows of ``length`` tokens
        (``reference.model.corpus.eval_windows`` with the model's tokenizer),
        checked against the model's context."""
        from reference.model.corpus import eval_windows
        from reference.model.forward import check_context

        check_context(length, self.base.config, f"--window-len {length}")
        return eval_windows(self.tokenizer, n, length)


def kernel_record(spec, manifest: Optional[dict] = None) -> dict:
    """JSON-able description of a kernel: name, declared contract, devices,
    version / digest, and the path it took (from a run manifest)."""
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
