"""The front doors set a run up once (``conformance.suite.setup``): ``int8conf check`` and ``pytest --kernel``
build byte-identical cases for an injected kernel that declares shape constraints."""

import json
from pathlib import Path

from subprocesses import run_python

from conformance.cli import main

REPO = Path(__file__).resolve().parents[3]
HELPERS = REPO / "tests" / "helpers"
#: an exact kernel declaring whole 32 x 32 x 64 tiles only, with F6 (int32 overflow) on one element: F6's
#: preparation cuts a window of outputs and lengthens K, within the kernel's constraints (else the prepared cases
#: would be shapes the kernel declines)
KERNEL = "buggy_kernels:tiled32_kernel"
REDUCED = ["--no-tile-edges", "--no-captures", "--no-model"]


def _cases(report: Path) -> list:
    doc = json.loads(report.read_text())
    return [
        (c["case"], c["shape"], c["operand_digests"], c["verdict"]) for c in doc["cases"] if c["source"] != "property"
    ]


def test_check_and_the_plugin_build_the_same_prepared_cases(tmp_path):
    rc = main(["check", f"--kernel={KERNEL}", "--inject=F6:one", *REDUCED, "--examples=0", "-q", f"--out={tmp_path}/c"])
    assert rc == 0  # the kernel declares wrap-around: F6's wrap is its declared behaviour (C3 / C4 preconditions)
    args = [f"--kernel={KERNEL}", "--int8conf-inject=F6:one", "--int8conf-examples=0"]
    args += [
        "--int8conf-no-tile-edges",
        "--int8conf-no-captures",
        "--int8conf-no-model",
        f"--int8conf-reports={tmp_path}/p",
    ]
    r = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *args], tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (check_report,) = (tmp_path / "c").rglob("conformance.json")
    (plugin_report,) = (tmp_path / "p").rglob("conformance.json")
    assert check_report.parent.name == plugin_report.parent.name  # one folder name for the injected kernel
    by_check, by_plugin = _cases(check_report), _cases(plugin_report)
    assert by_check == by_plugin and len(by_check) == 22
    # every prepared case the kernel can take is one it accepts (before: `check` prepared F6 without the
    # constraints: 16-row windows and K not a multiple of 64, every case declined)
    ran = [shape for _, shape, _, verdict in by_check if verdict != "not run"]
    assert ran and all(m >= 32 and k % 64 == 0 and n % 32 == 0 for m, k, n in ran)
    assert any(shape[1] > 131072 for _, shape, _, _ in by_check)  # F6 lengthened K past 2^17
