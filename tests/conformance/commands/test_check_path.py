"""The path from ``int8conf check`` to the bit comparison stays short: the project modules on the stack when C8's
``compare_bits`` is first called, with ``--jobs 1`` (the case evaluated in one forked child), are the 8 the README's
data flow names."""

import os
import traceback

import conformance.checks.output_bits as output_bits
from conformance.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PATH = [
    "conformance/cli.py",
    "conformance/commands/check.py",
    "conformance/suite/run.py",
    "conformance/suite/workers.py",
    "conformance/runtime/pool.py",
    "conformance/suite/evaluate.py",
    "conformance/checks/output_bits.py",
    "conformance/checks/compare.py",
]


def test_check_reaches_the_bit_comparison_through_eight_modules(tmp_path, monkeypatch):
    seen = tmp_path / "path.txt"
    compare = output_bits.compare_bits

    def traced(*args, **kwargs):
        if not seen.exists():  # the first call, in the forked child: the project modules on its stack, in order
            files = [os.path.relpath(f.filename, ROOT) for f in traceback.extract_stack()]
            mods = [f for f in dict.fromkeys(files) if f.startswith("conformance/")]
            seen.write_text("\n".join(mods + ["conformance/checks/compare.py"]))
        return compare(*args, **kwargs)

    monkeypatch.setattr(output_bits, "compare_bits", traced)
    rc = main(
        ["check", "--kernel", "cpu", "--jobs", "1", "--no-model", "--no-captures", "--examples", "0"]
        + ["--no-tile-edges", "-q", "--out", str(tmp_path / "r")]
    )
    assert rc == 0
    assert seen.read_text().split("\n") == PATH
