"""The conformance side of int8conf: the kernel contract and registry
(``kernels/``), the checks (``checks/``), the cases, the suite and its
reports, the pytest plugin and the ``int8conf`` CLI (``cli.py`` +
``commands/``)."""
