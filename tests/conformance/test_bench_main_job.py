"""``int8conf bench --main-job``: option checks, row selection, the reports a runner's results make,
and the subprocess runner's timeout -- with an injected runner or tiny commands, never the real jobs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conformance.bench import main_job as mj
from conformance.bench.gemm import device_slug, environment
from conformance.cli import main
from reference.errors import Int8confError


def _no_work(*a, **k):
    raise AssertionError("work started")


@pytest.mark.parametrize(
    "argv, cuda, line",
    [
        (["--main-job", "--gpu"], False, "bench: --gpu and --main-job are two modes; give one of them"),
        (
            ["--main-job", "--reps", "3", "--quick"],
            False,
            "bench --main-job: --reps, --quick: option(s) of the CPU benchmark (bench without --gpu) or the GPU "
            "benchmark (bench --gpu), which --main-job would ignore; drop them",
        ),
        (
            ["--main-job", "--precompile-workers", "0"],
            False,
            "bench --main-job: --precompile-workers: option(s) of the GPU benchmark (bench --gpu), which "
            "--main-job would ignore; drop them",
        ),
        (
            ["--rows", "e", "--cold-artifacts"],
            False,
            "bench: --rows, --cold-artifacts: option(s) of the main-job benchmark (bench --main-job), which the "
            "CPU benchmark would ignore; add --main-job or drop them",
        ),
        (
            ["--gpu", "--timeout", "5"],
            True,
            "bench --gpu: --timeout: option(s) of the main-job benchmark (bench --main-job), which --gpu would "
            "ignore; drop them",
        ),
        (
            ["--main-job", "--rows", "a,x"],
            True,
            "bench --main-job: --rows a,x: unknown row 'x'; rows: a (CUDA), b (CUDA), c (CUDA), d (CUDA), "
            "e (CPU-only machine), f (CPU-only machine)",
        ),
        (["--main-job", "--rows", "a,a"], True, "bench --main-job: --rows a,a: a row is named twice"),
        (
            ["--main-job", "--rows", "b"],
            True,
            "bench --main-job: --rows b: row b (warm Triton cache) needs row a before it, which fills that cache",
        ),
        (
            ["--main-job", "--rows", "b,a"],
            True,
            "bench --main-job: --rows b,a: row b (warm Triton cache) needs row a before it, which fills that cache",
        ),
        (
            ["--main-job", "--rows", "a,c"],
            False,
            "bench --main-job: --rows a,c: rows a, c need CUDA (torch.cuda.is_available() is False); this "
            "machine's rows: e, f",
        ),
        (
            ["--main-job", "--rows", "e"],
            True,
            "bench --main-job: --rows e: row e is for a CPU-only machine (this one has CUDA); this machine's "
            "rows: a, b, c, d",
        ),
    ],
)
def test_refused_options_are_one_line_before_any_work(argv, cuda, line, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(mj.torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(mj, "time_row", _no_work)
    monkeypatch.setattr(mj, "run_subprocess", _no_work)
    out = tmp_path / "out"
    assert main(["bench", *argv, *(["--out", str(out)] if "--main-job" in argv else [])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["int8conf: error: " + line]
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, what",
    [
        (["--timeout", "0"], "argument --timeout: expected seconds > 0 (at most 1e+06), got '0'"),
        (["--rows", "a,,b"], "argument --rows: expected a comma-separated list of names, got 'a,,b'"),
    ],
)
def test_bad_option_values_are_one_line(argv, what, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--main-job", *argv])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == ["int8conf bench: error: " + what]


def test_row_selection():
    assert mj.select_rows(None, cuda=True) == ("a", "b", "c", "d")
    assert mj.select_rows(None, cuda=False) == ("e", "f")
    assert mj.select_rows("d, a,b", cuda=True) == ("d", "a", "b")
    assert mj.select_rows("c", cuda=True) == ("c",)
    with pytest.raises(Int8confError):
        mj.select_rows("a,b,e", cuda=True)


class FakeRunner:
    """Records each call (argv, env, cwd, seconds left); answers ``results[the module run, or the subcommand]``."""

    def __init__(self, results: dict):
        self.calls, self.results = [], results

    def __call__(self, argv, env, cwd, timeout_s):
        self.calls.append((list(argv), dict(env), cwd, timeout_s))
        key = argv[2] if argv[2] != "conformance.cli" else argv[3]
        return self.results[key]


def test_a_runners_results_become_json_and_markdown(tmp_path):
    sweep_out = ["sweep triton: ...", "computed 10584 cells in 22.5 s (470.40 cells/s on average)", "scorecard: x"]
    fake = FakeRunner(
        {
            "check": mj.StepResult(48.0, 0, False, ["verdict: conformant"], ["progress 10/10"]),
            "pytest": mj.StepResult(75.0, 0, False, ["1256 passed in 74.1s"], []),
            "conformance.bench.paper_scale": mj.StepResult(5.0, 0, False, ["wrote model"], []),
            "sweep": mj.StepResult(25.0, 0, False, sweep_out, ["last words"], stamped=[(1.0, "sweep triton: ...")]),
        }
    )
    doc, paths = mj.run_main_job("a,b,c,d", tmp_path / "out", 300.0, cuda=True, runner=fake, log=lambda *_: None)
    slug = device_slug(environment()["device"])
    assert paths == {"json": tmp_path / "out" / slug / "main_job.json", "md": tmp_path / "out" / slug / "main_job.md"}
    on_disk = json.loads(paths["json"].read_text())
    assert on_disk == json.loads(json.dumps(doc))
    assert set(on_disk) == {"environment", "git", "device", "cuda", "cold_artifacts", "timeout_s", "timing", "rows"}
    assert {"torch", "triton", "cpu_count", "python", "device"} <= set(on_disk["environment"])
    rows = {r["row"]: r for r in on_disk["rows"]}
    assert list(rows) == ["a", "b", "c", "d"]
    keys = {"row", "job", "target_s", "wall_s", "target_over_measured", "status", "exit_code", "last_stderr_line"}
    keys |= {"last_stdout_line", "commands", "env", "triton_cache", "artifact_cache", "steps", "cpu_s", "load_before"}
    keys |= {"git", "log"}  # the commit each row was measured at, its stamped output beside the JSON
    assert all(keys <= set(r) for r in rows.values()) and set(rows["d"]) == keys | {"sweep"}
    # row d's sweep line arrives 1.0 s into its second step, after the 5.0 s model write
    assert (paths["json"].parent / rows["d"]["log"]).read_text() == "    6.0 sweep triton: ...\n"
    a = rows["a"]
    assert (a["wall_s"], a["target_s"], a["target_over_measured"], a["status"], a["exit_code"]) == (
        48.0,
        60.0,
        1.25,
        "ok",
        0,
    )
    assert a["cpu_s"] is None  # the fake runner measures none
    assert a["last_stderr_line"] == "progress 10/10" and a["last_stdout_line"] == "verdict: conformant"
    assert a["commands"] == [
        "TRITON_CACHE_DIR=$TMP/triton-a python -m conformance.cli check --kernel triton --device cuda"
    ]
    assert (a["triton_cache"], rows["b"]["triton_cache"], a["artifact_cache"]) == ("fresh", "warm (row a's)", "kept")
    assert rows["c"]["target_over_measured"] == 0.8
    assert "-n auto --kernel=triton" in rows["c"]["commands"][0]
    d = rows["d"]
    assert d["wall_s"] == 30.0 and d["target_over_measured"] == 2.0 and len(d["steps"]) == 2
    assert d["commands"] == [
        "python -m conformance.bench.paper_scale model model",
        "INT8CONF_TRITON_AUTOTUNE=0 python -m conformance.cli sweep --kernel triton --model model "
        "--no-model --db fresh.sqlite --out sweep",
    ]
    assert d["sweep"]["cells"] == 10584 and d["sweep"]["wall_s"] == 22.5 and d["sweep"]["target_over_measured"] == 1.333
    # a and b share one Triton cache, c has its own; every row works in a folder of its own
    envs = [c[1] for c in fake.calls]
    assert envs[0]["TRITON_CACHE_DIR"] == envs[1]["TRITON_CACHE_DIR"] != envs[2]["TRITON_CACHE_DIR"]
    assert all(c[1].get("INT8CONF_CACHE") == os.environ.get("INT8CONF_CACHE") for c in fake.calls)
    assert len({c[2] for c in fake.calls}) == 4
    assert all(c[1]["PYTHONPATH"].startswith(str(Path(mj.__file__).resolve().parents[2])) for c in fake.calls)
    assert not fake.calls[0][2].parent.exists()  # the scratch folder is removed
    md = paths["md"].read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| row"))
    assert [c.strip() for c in head.strip("|").split("|")] == [
        "row",
        "job",
        "wall s",
        "CPU s",
        "target s",
        "target/measured",
        "result",
        "Triton cache",
        "artifact cache",
        "load before",
        "commit",
    ]
    assert "| 48.0 " in md and "| <= 60 " in md and "| 1.25 " in md and "sweep alone" in md


def test_cold_artifacts_give_each_row_but_b_a_fresh_cache(tmp_path):
    fake = FakeRunner({"check": mj.StepResult(1.0, 0, False), "pytest": mj.StepResult(1.0, 0, False)})
    doc, _ = mj.run_main_job("a,b,c", tmp_path, 300.0, True, cuda=True, runner=fake, log=lambda *_: None)
    caches = [c[1]["INT8CONF_CACHE"] for c in fake.calls]
    assert caches[0] == caches[1] != caches[2]
    assert [r["artifact_cache"] for r in doc["rows"]] == ["fresh", "row a's", "fresh"]
    assert doc["cold_artifacts"] is True and doc["rows"][0]["env"]["INT8CONF_CACHE"] == "$TMP/cache-a"


def test_a_failed_or_timed_out_row_keeps_the_others(tmp_path):
    fake = FakeRunner(
        {
            "check": mj.StepResult(300.0, None, True, [], ["still compiling"]),
            "conformance.bench.paper_scale": mj.StepResult(2.0, 1, False, [], ["OSError: disk full"]),
            "pytest": mj.StepResult(50.0, 0, False),
        }
    )
    doc, paths = mj.run_main_job("a,d,c", tmp_path, 300.0, cuda=True, runner=fake, log=lambda *_: None)
    a, d, c = doc["rows"]
    assert (a["status"], a["exit_code"], a["target_over_measured"], a["last_stderr_line"]) == (
        "timeout",
        None,
        None,
        "still compiling",
    )
    assert (d["status"], d["exit_code"], d["last_stderr_line"], len(d["steps"])) == (
        "failed",
        1,
        "OSError: disk full",
        1,
    )
    assert d["sweep"]["wall_s"] is None  # the sweep never ran
    assert c["status"] == "ok" and c["target_over_measured"] == 1.2
    assert [call[0][2] for call in fake.calls] == ["conformance.cli", "conformance.bench.paper_scale", "pytest"]
    md = paths["md"].read_text()
    assert "TIMED OUT" in md and "FAILED (exit 1)" in md


def test_a_row_gets_what_is_left_of_the_limit_for_its_next_step(tmp_path):
    fake = FakeRunner(
        {"conformance.bench.paper_scale": mj.StepResult(70.0, 0, False), "sweep": mj.StepResult(30.0, None, True)}
    )
    doc, _ = mj.run_main_job("d", tmp_path, 100.0, cuda=True, runner=fake, log=lambda *_: None)
    assert [c[3] for c in fake.calls] == [100.0, 30.0]
    assert doc["rows"][0]["status"] == "timeout"


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_runner_stops_a_row_past_its_limit_with_its_children(tmp_path):
    """A row that sleeps 60 s under a 2 s limit: recorded as timed out, its process group gone."""
    code = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    code += "open('pid', 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)"
    row = mj.Row("e", "sleeps", 120.0, False, (mj.Step((sys.executable, "-c", code), {}, tmp_path / "row"),), "-", "-")
    doc, _ = mj.run_main_job(
        "e", tmp_path / "out", 2.0, cuda=False, rows_factory=lambda scratch, cold: {"e": row}, log=lambda *_: None
    )
    (r,) = doc["rows"]
    assert (r["status"], r["exit_code"], r["target_over_measured"]) == ("timeout", None, None)
    pid = (tmp_path / "row" / "pid").read_text() if (tmp_path / "row" / "pid").exists() else None
    if pid is not None:  # the child had started before the stop
        assert not _alive(int(pid))
    assert "TIMED OUT" in (tmp_path / "out" / device_slug(environment()["device"]) / "main_job.md").read_text()


def test_the_runner_records_exit_code_and_last_lines(tmp_path):
    code = "import sys; print('out 1'); print('out 2'); print('warn', file=sys.stderr); print('boom', file=sys.stderr); sys.exit(3)"
    r = mj.run_subprocess([sys.executable, "-c", code], {}, tmp_path / "new", 600.0)
    assert (r.exit_code, r.timed_out, r.stdout_tail, r.stderr_tail) == (3, False, ["out 1", "out 2"], ["warn", "boom"])
    assert r.cpu_s is not None and r.cpu_s >= 0
    # every line stamped (seconds since the start, never decreasing; the two streams' order is the reader threads')
    assert sorted(ln for _, ln in r.stamped) == ["boom", "out 1", "out 2", "warn"]
    times, lines = [t for t, _ in r.stamped], [ln for _, ln in r.stamped]
    assert all(0 <= t <= r.wall_s + 0.1 for t in times) and times == sorted(times)
    assert lines.index("out 1") < lines.index("out 2") and lines.index("warn") < lines.index("boom")


def test_the_rows_run_what_a_user_runs(tmp_path):
    rows = mj.build_rows(tmp_path, cold_artifacts=False, python="py")
    assert rows["a"].steps[0].argv == ("py", "-m", "conformance.cli", "check", "--kernel", "triton", "--device", "cuda")
    assert rows["b"].steps == (mj.Step(rows["a"].steps[0].argv, rows["a"].steps[0].env, tmp_path / "b"),)
    assert rows["e"].steps[0].argv == ("py", "-m", "conformance.cli", "check", "--kernel", "triton")
    assert rows["e"].steps[0].env == {} and not rows["e"].cuda
    c = rows["c"].steps[0].argv
    plugin = ("-p", "conformance.pytest_plugin") if not mj._plugin_registered() else ()
    assert c == ("py", "-m", "pytest", "-q", *plugin, "-n", "auto", "--kernel=triton", "--durations=8")
    assert [r.target_s for r in rows.values()] == [60.0, 20.0, 60.0, 60.0, 120.0, 900.0]
    # row f: the README's test command, in the checkout that holds the tests
    assert rows["f"].steps[0].argv == ("py", "-m", "pytest", "-q", "-n", "auto") and not rows["f"].cuda
    assert rows["f"].steps[0].cwd == Path(mj._package_root())


def test_git_commit(tmp_path):
    assert mj.git_commit(str(tmp_path)) is None
    root = Path(mj.__file__).resolve().parents[2]
    if (root / ".git").exists():
        g = mj.git_commit()
        assert len(g["commit"]) == 40 and isinstance(g["dirty"], bool)


def test_a_later_run_keeps_the_rows_it_did_not_time_and_replaces_the_rest(tmp_path, monkeypatch):
    fake = FakeRunner(
        {
            "check": mj.StepResult(48.0, 0, False, [], []),
            "pytest": mj.StepResult(75.0, 0, False, [], []),
            "conformance.bench.paper_scale": mj.StepResult(5.0, 0, False, [], []),
            "sweep": mj.StepResult(25.0, 0, False, [], []),
        }
    )
    monkeypatch.setattr(mj, "git_commit", lambda: {"commit": "1" * 40, "dirty": False})
    mj.run_main_job("c,a", tmp_path, 300.0, cuda=True, runner=fake, log=lambda *_: None)
    monkeypatch.setattr(mj, "git_commit", lambda: {"commit": "2" * 40, "dirty": False})
    fake.results["pytest"] = mj.StepResult(61.0, 0, False, [], [])
    doc, paths = mj.run_main_job("d,c", tmp_path, 300.0, cuda=True, runner=fake, log=lambda *_: None)
    assert [(r["row"], r["wall_s"], r["git"]["commit"][0]) for r in doc["rows"]] == [
        ("a", 48.0, "1"),
        ("c", 61.0, "2"),
        ("d", 30.0, "2"),
    ]
    assert json.loads(paths["json"].read_text())["rows"] == doc["rows"]
    assert "| 111111111111 |" in paths["md"].read_text() and "| 222222222222 |" in paths["md"].read_text()
