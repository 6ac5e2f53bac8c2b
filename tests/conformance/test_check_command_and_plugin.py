"""``int8conf check`` (in process) and ``pytest --kernel`` (subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from buggy_kernels import make_kernel

from conformance.cli import main
from conformance.kernels import registry
from conformance.pytest_plugin import long_items_first
from conformance.suite.plan import (
    CASE,
    CHECK,
    PAIR,
    PROPERTY,
)  # at collection: triton imported after an in-process pytester run aborts

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parents[1] / "helpers"  # holds buggy_kernels.py
FAST = ["--no-tile-edges", "--no-captures", "--no-model", "--examples", "0", "-q"]


def test_cli_check_conformant_and_not(tmp_path, capsys):
    assert main(["check", "--kernel", "cpu", "--out", str(tmp_path), *FAST]) == 0
    doc = json.loads((tmp_path / "cpu" / "conformance.json").read_text())
    assert doc["overall"]["verdict"] == "pass" and len(doc["cases"]) == 22
    out = capsys.readouterr().out
    assert str(tmp_path / "cpu" / "conformance.md") in out
    registry.register(make_kernel("chk-trunc", rounding="rtz"))
    assert main(["check", "--kernel", "chk-trunc", "--out", str(tmp_path), *FAST]) == 1
    doc = json.loads((tmp_path / "chk-trunc" / "conformance.json").read_text())
    assert doc["overall"]["failed_checks"] == ["C5", "C8"]


def test_cli_errors_are_one_line(capsys):
    assert main(["check", "--kernel", "no_such_pkg_xyz.mod:fn", *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("int8conf: error: ") and "no_such_pkg_xyz" in err[0]
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2


def _pytest(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_plugin_kernel_junit_and_reports(tmp_path):
    rep = tmp_path / "out"
    r = _pytest(
        tmp_path,
        "--kernel=cpu",
        "--kernel=buggy_kernels:truncating_kernel",
        "--against=cpu",
        "--int8conf-no-tile-edges",
        "--int8conf-no-captures",
        "--int8conf-examples=2",
        "--int8conf-no-model",
        f"--int8conf-reports={rep}",
        "--junitxml=j.xml",
    )
    assert r.returncode == 1, r.stdout[-2000:]
    cases = ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
    res: dict = {}
    for c in cases:
        failed = c.find("failure") is not None
        res.setdefault(c.get("classname"), {})[c.get("name")] = failed
    # the loaded kernel takes the name it declares (``declare(name="truncating")``)
    assert set(res) == {"int8conf-cpu", "int8conf-truncating"}
    # 22 synthetic cases + property + C9 + C13-C15 (n/a on the CPU: skipped) + 22 pairwise items (cpu vs cpu: identical)
    assert len(res["int8conf-cpu"]) == 49 and not any(res["int8conf-cpu"].values())
    trunc = res["int8conf-truncating"]
    # every synthetic case rounds some element away from zero under RNE, and
    # differs from cpu although both declare the CUTLASS-style contract
    syn = [k for k in trunc if k.startswith("synthetic/")]
    pair = [k for k in trunc if k.startswith("pairwise/")]
    assert len(syn) == len(pair) == 22 and all(trunc[k] for k in syn + pair)
    cpu = json.loads((rep / "cpu" / "conformance.json").read_text())
    assert cpu["overall"]["verdict"] == "pass"
    assert cpu["partial"] == {
        "partial": False,
        "reason": None,
        "cases_ran": 22,
        "cases_total": 22,
        "stage": None,
        "note": None,
    }
    doc = json.loads((rep / "truncating" / "conformance.json").read_text())
    assert doc["overall"]["verdict"] == "fail" and "C8" in doc["overall"]["failed_checks"]
    assert doc["kernel"]["contract"]["scale_order"] == "w_then_a"
    assert doc["pairwise"]["counts"] == {"differ-unexpected": 22}


def test_plugin_selection_marks_the_report_partial(tmp_path):
    """A pytest selection runs 2 of the 22 fixed cases: conformance.json says
    so in its ``partial`` record (reason ``subset``, no stop stage)."""
    rep = tmp_path / "out"
    r = _pytest(
        tmp_path,
        "--kernel=cpu",
        "--int8conf-no-tile-edges",
        "--int8conf-no-captures",
        "--int8conf-examples=0",
        "--int8conf-no-model",
        f"--int8conf-reports={rep}",
        "-k",
        "ordinary",
    )
    assert r.returncode == 0, r.stdout[-2000:]
    doc = json.loads((rep / "cpu" / "conformance.json").read_text())
    note = "partial run: 2 of 22 fixed cases ran (pytest selection or early stop); the verdict covers only those"
    assert doc["partial"] == {
        "partial": True,
        "reason": "subset",
        "cases_ran": 2,
        "cases_total": 22,
        "stage": None,
        "note": note,
    }
    assert doc["notes"] == [note] and len(doc["cases"]) == 2


def test_plugin_bad_kernel_and_inactive(tmp_path):
    r = _pytest(tmp_path, "--kernel=bogus_kernel_name")
    assert r.returncode == 4 and "Traceback" not in r.stderr + r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == [
        f"ERROR: int8conf: unknown kernel 'bogus_kernel_name': not a built-in "
        f"{list(registry.BUILTINS)}, not registered, not 'pkg.module:function', "
        f"not an 'int8conf.kernels' entry point"
    ]
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    r = _pytest(tmp_path)
    assert r.returncode == 0 and "1 passed" in r.stdout and "int8conf" not in r.stdout


def test_pytest_console_script_imports_a_kernel_from_the_directory_it_runs_in(tmp_path):
    # the `pytest` script puts its bin folder, not the invocation directory, on sys.path
    script = Path(sys.executable).with_name("pytest")
    if not script.exists():
        pytest.skip("no pytest console script next to this interpreter")
    (tmp_path / "my_cwd_kernel.py").write_text(
        "import torch\n"
        "from conformance.kernels.loader import declare\n"
        "@declare(contract='cutlass')\n"
        "def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):\n"
        "    raise RuntimeError('not called by --collect-only')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [
            str(script),
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "--kernel=my_cwd_kernel:scaled_mm",
            "--int8conf-no-tile-edges",
            "--int8conf-no-captures",
            "--int8conf-no-model",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-500:]
    assert "int8conf-my_cwd_kernel" in r.stdout or "my_cwd_kernel" in r.stdout


def test_console_verdict_of_a_precondition_failure_says_so():
    from conformance.commands.check import verdict_markup

    assert verdict_markup("fail", {"failure_kind": "precondition"}) == ("[yellow]precondition violated (1)[/]")
    assert verdict_markup("fail", {"failure_kind": "precondition", "precondition_case": True}) == (
        "[cyan]precondition case (1)[/]"
    )
    assert verdict_markup("fail", {"failure_kind": "kernel"}) == "[bold red]fail[/]"
    assert verdict_markup("pass", {}) == "[green]pass[/]"


NO_BIAS_KERNEL = (
    "import torch\n"
    "from reference.contract import CUTLASS_STYLE\n"
    "from reference.epilogue import reference_scaled_mm\n"
    "def fn(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):\n"
    "    return reference_scaled_mm(a, b, scale_a, scale_b, CUTLASS_STYLE, None, out_dtype)\n"
    "fn.int8conf_contract = 'cutlass'\n"
)


def test_a_failure_matching_no_fault_class_still_gets_the_signature_section(tmp_path, monkeypatch, capsys):
    """A kernel that drops the bias (errors of ~32,000 ulp) matches none of the
    catalogue's signatures: conformance.md, the JSON and the terminal still say so,
    with the failing case count, so the reader knows the hint was computed."""
    (tmp_path / "sig_nobias_kernel.py").write_text(NO_BIAS_KERNEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "sig_nobias_kernel", raising=False)
    assert main(["check", "--kernel", "sig_nobias_kernel:fn", "--out", "r", *FAST]) == 1
    line = "the failures match no fault class of the catalogue (6 failing cases)"
    rdir = tmp_path / "r" / "sig_nobias_kernel_fn"
    doc = json.loads((rdir / "conformance.json").read_text())
    assert doc["overall"]["failed_checks"] == ["C5", "C6", "C8"]
    assert max(c["checks"]["C8"]["evidence"].get("max_ulp") or 0 for c in doc["cases"]) > 30000
    assert doc["fault_signatures"] == ["all failing cases: with bias", line]
    md = (rdir / "conformance.md").read_text().splitlines()
    i = md.index("Failure signature (`conformance.suite.signatures`):")
    assert md[i + 1 : i + 5] == ["", "- all failing cases: with bias", f"- {line}", ""]
    out = capsys.readouterr().out.splitlines()
    assert f"failure signature: {line}" in out


def test_failing_check_prints_the_matched_signatures_on_the_terminal(tmp_path, capsys):
    """The fault-signature lines used to be in conformance.md only; the terminal
    summary of a failing run now shows the same lines (at most
    MAX_SIGNATURE_LINES), and a passing run shows none."""
    from conformance.commands.check import MAX_SIGNATURE_LINES, signature_summary

    registry.register(make_kernel("chk-trunc-sig", rounding="rtz"))
    assert main(["check", "--kernel", "chk-trunc-sig", "--out", str(tmp_path), *FAST]) == 1
    out = capsys.readouterr().out.splitlines()
    doc = json.loads((tmp_path / "chk-trunc-sig" / "conformance.json").read_text())
    sig = doc["fault_signatures"]
    assert sig[0].startswith("consistent with F4 output truncation: final conversion rounds toward zero")
    assert len(sig) > 0
    printed = [x for x in out if x.startswith("failure signature")]
    assert printed == signature_summary(sig)
    assert len(printed) == min(len(sig), MAX_SIGNATURE_LINES) + (len(sig) > MAX_SIGNATURE_LINES)
    assert main(["check", "--kernel", "cpu", "--out", str(tmp_path), *FAST]) == 0
    assert not any(x.startswith("failure signature") for x in capsys.readouterr().out.splitlines())


def test_terminal_signature_summary_is_capped():
    from conformance.commands.check import signature_summary

    lines = [f"consistent with F{i} x" for i in range(1, 7)]
    assert signature_summary(lines, limit=4) == [
        *(f"failure signature: consistent with F{i} x" for i in range(1, 5)),
        "failure signature: 2 more in conformance.md",
    ]
    assert signature_summary([]) == []


def test_collect_only_counts_the_suite_items(pytester):
    # the suite's items are made in pytest_collection_modifyitems; --collect-only's
    # summary must count them (it said "no tests collected")
    r = pytester.runpytest_inprocess("--co", "-q", "--kernel=cpu", "-p", "no:cacheprovider")
    ids = [line for line in r.outlines if line.startswith("int8conf-cpu::")]
    assert r.ret == pytest.ExitCode.OK and len(ids) > 300
    assert f"{len(ids)} tests collected" in r.outlines[-1]


def test_an_xdist_worker_spreads_the_long_items_over_the_first_quarter():
    def case(m, n, k, source="family"):
        return types.SimpleNamespace(m=m, n=n, k=k, meta={"source": source})

    sizes = [(i % 7 + 1, 8, 8) for i in range(36)]
    ks = types.SimpleNamespace(cases=[case(*s) for s in sizes] + [case(1, 1, 1, "capture")])

    def item(n, kind, index=None):
        return types.SimpleNamespace(step=types.SimpleNamespace(kind=kind, index=index, n=n), kstate=ks)

    items = [item(i, CASE if i % 2 else PAIR, i) for i in range(37)]
    items += [item(37, PROPERTY), item(38, CHECK), item(39, CHECK)]
    got = long_items_first(items)
    assert sorted(it.step.n for it in got) == list(range(40))
    # 40 items, 3 long ones: 40 // 12 + 1 = 4 apart, from the first position, in plan order
    assert [i for i, it in enumerate(got) if it.step.kind in (CHECK, PROPERTY)] == [0, 4, 8]
    assert [got[i].step.n for i in (0, 4, 8)] == [37, 38, 39]
    rest = [it for it in got if it.step.kind not in (CHECK, PROPERTY)]
    assert rest[0].step.n == 36  # the captured-layer case, then M*N*K largest first (ties in plan order)
    work = [ks.cases[it.step.index].m for it in rest[1:]]
    assert work == sorted(work, reverse=True) and [it.step.n for it in rest[1:6]] == [6, 13, 20, 27, 34]


# ---------------------------------------------------------- xdist worker threads


def test_xdist_worker_sets_its_share_and_the_controller_does_not(monkeypatch):
    import types

    import torch

    from conformance import pytest_plugin as plug

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("INT8CONF_WORKER_THREADS", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    monkeypatch.setattr(plug.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    opts = types.SimpleNamespace(int8conf_threads=None, numprocesses=4)
    cfg = types.SimpleNamespace(option=opts, getoption=lambda name: getattr(opts, name))
    plug._share_cores(cfg)  # xdist controller
    assert calls == []
    cfg.workerinput = {"workerid": "gw1"}
    plug._share_cores(cfg)
    assert calls == [4]
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    opts.numprocesses = None
    del cfg.workerinput
    plug._share_cores(cfg)  # no xdist: every core
    assert calls == [4, 16]


def test_a_check_item_under_xdist_shares_the_cores_among_the_long_items(monkeypatch):
    import types

    import torch

    from conformance import pytest_plugin as plug

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("INT8CONF_WORKER_THREADS", raising=False)
    monkeypatch.setattr(plug.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(plug, "_check_verdict", lambda result: None)
    opts = types.SimpleNamespace(int8conf_threads=None)
    item = types.SimpleNamespace(
        config=types.SimpleNamespace(getoption=lambda name: getattr(opts, name), workerinput={"workerid": "gw0"}),
        st=types.SimpleNamespace(long_items=5),
        kstate=types.SimpleNamespace(run_check=lambda check_id: None),
        step=types.SimpleNamespace(check_id="E1"),
    )
    before = torch.get_num_threads()
    plug.CheckItem.runtest(item)  # 16 cores, 5 long items at once: 3 threads each, then restored
    assert calls == [3, before]
    del item.config.workerinput
    plug.CheckItem.runtest(item)  # no xdist: left as the process has it, only restored
    assert calls == [3, before, before]


@pytest.mark.parametrize("xdist", [False, True])
def test_bad_worker_threads_is_one_usage_error_before_any_worker(tmp_path, xdist):
    env = dict(os.environ, INT8CONF_WORKER_THREADS="abc")
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--kernel=cpu",
        "--int8conf-no-captures",
        "--int8conf-no-tile-edges",
        "--int8conf-no-model",
        f"--int8conf-reports={tmp_path}",
    ] + (["-n", "2"] if xdist else [])
    r = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 4, out[-2000:]  # pytest's usage error
    assert "INT8CONF_WORKER_THREADS must be an integer >= 1, got 'abc'" in out
    assert "Traceback" not in out and "node down" not in out, out[-2000:]


# --- an unusable --int8conf-reports is a usage error at configure time ---------------

_PLUGIN_FAST = ("--int8conf-no-tile-edges", "--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0")


def _tree(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _refused_at_configure(r) -> list:
    """pytest exit 4 (usage error), no traceback, no item run; the stderr lines."""
    assert r.returncode == 4, (r.stdout + r.stderr)[-2000:]
    assert "Traceback" not in r.stdout + r.stderr
    assert "passed" not in r.stdout and "int8conf conformance reports" not in r.stdout
    return [ln for ln in r.stderr.splitlines() if ln.strip()]


@pytest.mark.parametrize(
    "layout,kernels,bad,problem",
    [
        # the reports "folder" is a file (/etc/passwd): refused as such, before its kernel subfolder is tried
        ("rep", ["cpu"], "rep", "exists and is not a directory"),
        ("rep/cpu", ["cpu"], "rep/cpu", "exists and is not a directory"),
        ("rep/cpu/conformance.json/", ["cpu"], "rep/cpu", "conformance.json is a directory, not a file"),
        # the second kernel's folder is refused: the first one's, just made, is removed again
        ("rep/int_mm", ["cpu", "int_mm"], "rep/int_mm", "exists and is not a directory"),
    ],
)
def test_plugin_unusable_reports_folder_is_a_usage_error_before_any_item(tmp_path, layout, kernels, bad, problem):
    p = tmp_path / layout.rstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.mkdir() if layout.endswith("/") else p.write_text("x")
    before = _tree(tmp_path)
    r = _pytest(tmp_path, *(f"--kernel={k}" for k in kernels), *_PLUGIN_FAST, f"--int8conf-reports={tmp_path / 'rep'}")
    bad = tmp_path / bad
    assert _refused_at_configure(r) == [f"ERROR: int8conf: --int8conf-reports {bad}: {problem.format(bad=bad)}"]
    assert _tree(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_plugin_read_only_reports_folder_is_a_usage_error(tmp_path):
    (tmp_path / "rep" / "cpu").mkdir(parents=True)
    (tmp_path / "rep" / "cpu").chmod(0o555)
    try:
        r = _pytest(tmp_path, "--kernel=cpu", *_PLUGIN_FAST, f"--int8conf-reports={tmp_path / 'rep'}")
    finally:
        (tmp_path / "rep" / "cpu").chmod(0o755)
    assert _refused_at_configure(r) == [f"ERROR: int8conf: --int8conf-reports {tmp_path / 'rep' / 'cpu'}: not writable"]


def test_plugin_report_folders_checked_at_configure_are_not_left_empty(tmp_path):
    rep = tmp_path / "new" / "rep"
    r = _pytest(tmp_path, "--collect-only", "--kernel=cpu", *_PLUGIN_FAST, f"--int8conf-reports={rep}")
    assert r.returncode == 0, r.stdout[-2000:]
    assert _tree(tmp_path) == []  # made and checked at configure, removed: nothing was written


# --- issue 31 ------------------------------------------------------------------------

_NOSUCH = (
    "'nosuch:fn': cannot import module 'nosuch': ModuleNotFoundError: No module named "
    "'nosuch' (is its directory on PYTHONPATH? run from it or set PYTHONPATH)"
)


def test_a_bad_against_kernel_is_named_as_against_not_kernel(tmp_path, capsys):
    """Issue 31 item 4: the error named --kernel."""
    assert main(["check", "--kernel", "cpu", "--against", "nosuch:fn", "--out", str(tmp_path), *FAST]) == 2
    assert capsys.readouterr().err.splitlines() == [f"int8conf: error: --against {_NOSUCH}"]
    assert not (tmp_path / "cpu").exists()
    r = _pytest(tmp_path, "--kernel=cpu", "--against=nosuch:fn")
    assert r.returncode == 4 and "Traceback" not in r.stderr + r.stdout
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [f"ERROR: int8conf: --against {_NOSUCH}"]


def test_against_a_kernel_of_the_other_operand_type_is_one_line(tmp_path, capsys):
    """An e4m3 kernel compared with an int8 one: one line naming both operand types, exit 2, no folder left."""
    assert main(["check", "--kernel", "fp8-cpu", "--against", "cpu", "--out", str(tmp_path), *FAST]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "int8conf: error: --against cpu takes int8 operands, fp8-cpu takes e4m3: compare kernels of one operand type "
        "(e.g. --against fp8-cpu for an e4m3 kernel)"
    ]
    assert not (tmp_path / "fp8-cpu").exists()


def test_plugin_default_reports_leave_committed_folders_and_full_reports_alone(tmp_path):
    """``pytest --kernel=cpu`` writes ``int8conf-reports/check/cpu/`` under the invocation folder (never the
    committed ``reports/``); a ``-k`` run then writes ``conformance.partial.json`` beside the complete report and
    leaves it as it was (issue 42 item 6)."""
    assert _pytest(tmp_path, "--kernel=cpu", *_PLUGIN_FAST).returncode == 0
    d = tmp_path / "int8conf-reports" / "check" / "cpu"
    full = (d / "conformance.json").read_text()
    assert not (tmp_path / "reports").exists() and json.loads(full)["partial"]["partial"] is False
    r = _pytest(tmp_path, "--kernel=cpu", *_PLUGIN_FAST, "-k", "ordinary-s0")
    assert r.returncode == 0, r.stdout[-2000:]
    assert (d / "conformance.json").read_text() == full
    part = json.loads((d / "conformance.partial.json").read_text())["partial"]
    assert (part["partial"], part["cases_ran"], part["cases_total"]) == (True, 1, 22)
    assert str(d / "conformance.partial.json") in r.stdout
