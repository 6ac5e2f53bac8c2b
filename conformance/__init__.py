"""Kernel contract and registry, the checks, the pytest plugin, the sweep
runner, scoring, reports and the ``int8conf`` CLI."""
