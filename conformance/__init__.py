"""The conformance side of int8conf: the kernel contract and registry
(``kernels/``), the checks (``checks/``), the cases, the suite and its
reports, the pytest plugin and the ``int8conf`` CLI (``cli.py`` +
``commands/``)."""

import os

# torch's default CUDA availability check (cudaGetDeviceCount) initializes the CUDA driver and poisons fork: every
# worker forked after it (the fixed cases', the containment child) finds CUDA unusable and the kernel runs in this
# process, uncontained. NVML answers the same question without the driver (a user's own setting is kept).
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
