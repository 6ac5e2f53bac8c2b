"""Shared set-up of the per-cell measurement scripts (count_cell_ops.py,
count_cell_digests.py): the sweep's layer-cell units for KERNEL on LAYERS
(indices into the default model's captured layers) x FAULTS x the three
coverages x both scale modes, as ``conformance.sweep.runner.batches`` groups
them (one unit per layer and scale mode)."""
from conformance.commands.sweep import _checkpoint_dirs
from conformance.kernels.registry import get_kernel
from conformance.sweep.cells import SweepSpec, layer_cells
from conformance.sweep.runner import SweepTask, batches
from reference.model.assets import default_model_dir
from reference.model.capture import default_capture_set


def layer_units(kernel: str, layers: list, faults: list) -> list:
    """Units (tuples of SweepTask) of the layer cells; model checks off."""
    cs = default_capture_set()
    names = cs.layer_names()
    spec = SweepSpec(kernel=kernel, kernel_digest=get_kernel(kernel).source_digest,
                     capture_dir=str(cs.dir), capture_digest="x", model_dir=str(default_model_dir()),
                     c7={}, model_checks=False, checkpoint_dirs=_checkpoint_dirs(cs, ["own", "pow2"]))
    cells = layer_cells([names[i] for i in layers], faults, ["one", "1%", "all"], ["own", "pow2"], [0])
    return batches([SweepTask(c, spec, None) for c in cells])
