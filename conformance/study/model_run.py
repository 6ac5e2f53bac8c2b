"""The model ``int8conf generate`` / ``perplexity`` evaluate: bf16 as is, or every decoder linear W8A8 through a
``KernelSpec`` with the weights of one scale mode."""

from __future__ import annotations

from conformance.checks import token_flip
from conformance.kernels.registry import resolve_kernels
from reference.errors import Int8confError
from reference.model import forward as wf
from reference.model.weights import WEIGHT_SCALE_MODES, check_checkpoint_mode, checkpoint_weights, load_weights


def build_model(
    model_dir,
    scale_mode: str,
    kernel=None,
    checkpoint=None,
    track_acc: bool = False,
    base_model=None,
    weights=None,
    kernel_scale_mode=None,
):
    """``(model, AccStats or None, first-call kernel manifest)``: bf16 as is, or W8A8 through ``kernel``.

    ``scale_mode``: one of :data:`WEIGHT_SCALE_MODES`; ``checkpoint``: optional compressed-tensors W8A8 directory;
    ``track_acc``: record per-layer max |acc|; ``base_model`` / ``weights``: reuse a loaded model / weight map;
    ``kernel_scale_mode``: the GemmOperands ``scale_mode`` the kernel is told (default ``scale_mode``, or the
    checkpoint's when ``checkpoint`` is given and ``weights`` is not). Raises Int8confError: unknown scale mode.
    """
    if scale_mode not in WEIGHT_SCALE_MODES:
        raise Int8confError(f"--scale-mode {scale_mode!r} is not one of {WEIGHT_SCALE_MODES}")
    check_checkpoint_mode(checkpoint, scale_mode)
    base = base_model if base_model is not None else wf.load_model(model_dir)
    if scale_mode == "bf16":
        return base, None, {}
    if weights is None and checkpoint is not None:
        weights, ck_mode, _ = checkpoint_weights(base, checkpoint)
        kernel_scale_mode = kernel_scale_mode or ck_mode
    elif weights is None:
        weights = load_weights(base, scale_mode)
    manifest: dict = {}
    fns = token_flip.kernel_layer_callables(
        kernel, wf.linear_names(base.config.num_hidden_layers), kernel_scale_mode or scale_mode, first_manifest=manifest
    )
    model, stats = wf.build_w8a8_model(base, weights, fns, track_acc=track_acc)
    return model, stats, manifest


def resolve_kernel_list(arg: str):
    """KernelSpecs named by a comma list (``cpu,int_mm``) or ``all``; KernelError for an unknown name."""
    return resolve_kernels([n.strip() for n in arg.split(",") if n.strip()])


def generate_header(spec, label: str, kernel_path=None) -> str:
    """One line naming the arm a text-mode run used (``spec`` None: bf16; ``label`` e.g. ``"own scales"``;
    ``kernel_path`` the manifest's path or None), e.g. ``"W8A8 own scales, kernel cpu (cpu-ref)"``."""
    if spec is None:
        return "bf16 model"
    return f"W8A8 {label}, kernel {spec.name}" + (f" ({kernel_path})" if kernel_path else "")
