"""``int8conf bench --main-job``: wall seconds of the jobs a user runs first, each row timed as one
subprocess from start to exit (Python start-up included) in a scratch folder of its own, against
its target; writes ``<out>/<device slug>/main_job.{json,md}`` atomically. Rows (:data:`ROWS`):
on CUDA ``a`` the check with an empty Triton cache, ``b`` the same again warm, ``c`` the pytest
plugin with an empty Triton cache, ``d`` the paper-scale model write and sweep from a fresh store;
without CUDA ``e`` the check under the Triton interpreter, ``f`` the README's test command in this checkout.
Prints figures; asserts no timing (``conformance.bench.figures`` quotes them in the READMEs)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import pandas as pd
import torch

import conformance
from conformance.bench.gemm import device_slug, environment
from reference.command_line import ensure_out_dir, removed_if_refused
from reference.errors import Int8confError
from reference.fileio import atomic_write_json, atomic_write_text

#: every row: key -> (job, target seconds, needs CUDA)
ROWS = {
    "a": ("check, empty Triton cache", 60.0, True),
    "b": ("check again, warm Triton cache", 20.0, True),
    "c": ("pytest plugin, empty Triton cache", 60.0, True),
    "d": ("paper-scale model write + sweep from a fresh store", 60.0, True),
    "e": ("check, Triton interpreter (2 idle cores)", 120.0, False),
    "f": ("the README's test command, pytest -q -n auto (2 idle cores)", 900.0, False),
}
#: row d's sweep alone: (target seconds, the sweep's own timing line)
SWEEP_TARGET_S = 30.0
SWEEP_TIMING = re.compile(r"computed (\d+) cells in ([0-9.]+) s")
#: seconds between SIGTERM (the commands write a partial report) and SIGKILL of a stopped row
STOP_GRACE_S = 10.0
#: lines kept of each step's stdout / stderr (progress-bar lines dropped)
TAIL_LINES = 20
#: the placeholder of the scratch folder in recorded commands and environments
SCRATCH = "$TMP"
JSON_NAME, MD_NAME = "main_job.json", "main_job.md"


@dataclass(frozen=True)
class Step:
    """One subprocess of a row: ``argv`` (the interpreter first), ``env`` overrides of the inherited
    environment, ``cwd`` (created when missing)."""

    argv: tuple
    env: Mapping[str, str]
    cwd: Path


@dataclass(frozen=True)
class Row:
    """A timed row: ``steps`` run in order, the row's time is their summed wall seconds; a step that
    fails or times out ends the row. ``triton_cache`` / ``artifact_cache``: what the row starts with."""

    key: str
    job: str
    target_s: float
    cuda: bool
    steps: tuple
    triton_cache: str
    artifact_cache: str
    sweep_part: bool = False


@dataclass
class StepResult:
    """What a runner reports of one step: wall seconds (up to the stop when ``timed_out``), exit code
    (None when it never exited by itself), the last :data:`TAIL_LINES` lines of stdout and stderr, CPU
    seconds (user + system) of the process and the descendants it waited for (None: not measured), and
    ``stamped``: every output line but progress bars as ``(seconds since the step started, line)``, in
    arrival order (the row's profile by phase)."""

    wall_s: float
    exit_code: Optional[int]
    timed_out: bool
    stdout_tail: list = field(default_factory=list)
    stderr_tail: list = field(default_factory=list)
    cpu_s: Optional[float] = None
    stamped: list = field(default_factory=list)


Runner = Callable[[Sequence[str], Mapping[str, str], Path, float], StepResult]


def build_rows(scratch: Path, cold_artifacts: bool, python: str = sys.executable) -> dict:
    """Every row of :data:`ROWS` as a :class:`Row` working under ``scratch`` (each its own folder, so
    default report folders land there). ``cold_artifacts``: each row but ``b`` (which repeats ``a``)
    gets a fresh ``INT8CONF_CACHE``; otherwise the inherited artifact cache is kept."""
    cli = (python, "-m", "conformance.cli")
    check = (*cli, "check", "--kernel", "triton")
    plugin = () if _plugin_registered() else ("-p", "conformance.pytest_plugin")

    def env(triton: Optional[str], cache: Optional[str], **extra) -> dict:
        e = {"TRITON_CACHE_DIR": str(scratch / triton)} if triton else {}
        if cold_artifacts and cache:
            e["INT8CONF_CACHE"] = str(scratch / cache)
        return e | extra

    art = lambda own: "fresh" if cold_artifacts and own else ("row a's" if cold_artifacts else "kept")
    a_env = env("triton-a", "cache-a")
    steps = {
        "a": (Step((*check, "--device", "cuda"), a_env, scratch / "a"),),
        "b": (Step((*check, "--device", "cuda"), a_env, scratch / "b"),),
        "c": (
            Step(
                (python, "-m", "pytest", "-q", *plugin, "-n", "auto", "--kernel=triton", "--durations=8"),
                env("triton-c", "cache-c"),
                scratch / "c",
            ),
        ),
        "d": (
            Step(
                (python, "-m", "conformance.bench.paper_scale", "model", "model"), env(None, "cache-d"), scratch / "d"
            ),
            Step(
                (*cli, *"sweep --kernel triton --model model --no-model --db fresh.sqlite --out sweep".split()),
                env(None, "cache-d", INT8CONF_TRITON_AUTOTUNE="0"),
                scratch / "d",
            ),
        ),
        "e": (Step(check, env(None, "cache-e"), scratch / "e"),),
        # in the checkout (the tests live there); its reports go to the gitignored int8conf-reports/
        "f": (Step((python, "-m", "pytest", "-q", "-n", "auto"), env(None, "cache-f"), Path(_package_root())),),
    }
    triton = {"a": "fresh", "b": "warm (row a's)", "c": "fresh", "d": "inherited", "e": "inherited (interpreter)"}
    triton["f"] = triton["e"]
    return {
        k: Row(k, job, target, cuda, steps[k], triton[k], art(k != "b"), sweep_part=k == "d")
        for k, (job, target, cuda) in ROWS.items()
    }


def _plugin_registered() -> bool:
    """Whether pytest loads ``conformance.pytest_plugin`` by itself (the installed ``pytest11`` entry point)."""
    from importlib.metadata import entry_points

    return any(e.value == "conformance.pytest_plugin" for e in entry_points(group="pytest11"))


def select_rows(text: Optional[str], cuda: bool) -> tuple:
    """The row keys of ``--rows`` (comma-separated, in the given order; None: every row of this
    machine). Raises Int8confError (one line): unknown or repeated row, a CUDA row without CUDA, the
    CPU-only row with CUDA, ``b`` without ``a`` (``a`` fills the Triton cache ``b`` starts warm with)."""
    mine = tuple(k for k, (_, _, c) in ROWS.items() if c == cuda)
    if text is None:
        return mine
    keys = [t.strip() for t in text.split(",")]
    listed = ", ".join(f"{k} ({'CUDA' if ROWS[k][2] else 'CPU-only machine'})" for k in ROWS)
    for k in keys:
        if k not in ROWS:
            raise Int8confError(f"bench --main-job: --rows {text}: unknown row {k!r}; rows: {listed}")
    if len(set(keys)) != len(keys):
        raise Int8confError(f"bench --main-job: --rows {text}: a row is named twice")
    other = [k for k in keys if k not in mine]
    if other:
        names = f"row {other[0]}" if len(other) == 1 else f"rows {', '.join(other)}"
        verb = "is" if len(other) == 1 else "are"
        where = (
            f"{'needs' if len(other) == 1 else 'need'} CUDA (torch.cuda.is_available() is False)"
            if not cuda
            else f"{verb} for a CPU-only machine (this one has CUDA)"
        )
        raise Int8confError(f"bench --main-job: --rows {text}: {names} {where}; this machine's rows: {', '.join(mine)}")
    if "b" in keys and ("a" not in keys or keys.index("a") > keys.index("b")):
        raise Int8confError(
            f"bench --main-job: --rows {text}: row b (warm Triton cache) needs row a before it, which fills that cache"
        )
    return tuple(keys)


def run_subprocess(argv: Sequence[str], env: Mapping[str, str], cwd: Path, timeout_s: float) -> StepResult:
    """Run ``argv`` in ``cwd`` (created) with ``env`` (the whole environment) in a session of its own,
    stdin closed; past ``timeout_s`` seconds its process group gets SIGTERM, after :data:`STOP_GRACE_S`
    more SIGKILL. Interrupted (Ctrl-C), it stops the group the same way and re-raises. CPU seconds: this
    process's children's usage before and after (one step runs at a time)."""
    cwd.mkdir(parents=True, exist_ok=True)
    cpu0 = _children_cpu_s()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    streams: dict = {"out": [], "err": []}
    stamped: list = []
    readers = [
        threading.Thread(target=_read_lines, args=(f, streams[k], stamped, t0), daemon=True)
        for k, f in (("out", p.stdout), ("err", p.stderr))
    ]
    for t in readers:
        t.start()
    timed_out = False
    try:
        p.wait(timeout=max(timeout_s, 0.0))
    except subprocess.TimeoutExpired:
        timed_out = True
    except BaseException:  # noqa: BLE001 -- cleanup then re-raise: Ctrl-C or any error stops the child's process group
        _stop_group(p)
        raise
    wall = time.perf_counter() - t0
    if timed_out:
        _stop_group(p)
    for t in readers:  # a descendant outside the group may hold a pipe: do not wait for it
        t.join(timeout=STOP_GRACE_S)
    code = None if timed_out else p.returncode
    return StepResult(
        wall,
        code,
        timed_out,
        _tail(streams["out"]),
        _tail(streams["err"]),
        _children_cpu_s() - cpu0,
        sorted(stamped, key=lambda x: x[0]),
    )


def _read_lines(f, lines: list, stamped: list, t0: float) -> None:
    """Reader thread: each line of ``f`` (bytes; a carriage return also ends a line) into ``lines`` and, with its
    arrival second, into ``stamped`` (progress-bar lines only into ``lines``)."""
    for raw in iter(f.readline, b""):
        t = round(time.perf_counter() - t0, 1)
        for ln in raw.decode("utf-8", "replace").replace("\r", "\n").splitlines():
            ln = ln.rstrip()
            if ln.strip():
                lines.append(ln)
                if "━" not in ln:
                    stamped.append((t, ln))
    f.close()


def _children_cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def _stop_group(p: subprocess.Popen) -> None:
    """SIGTERM to ``p``'s process group; after :data:`STOP_GRACE_S` (or once ``p`` exits) SIGKILL to what is
    left of the group (``p`` itself, or workers that outlived it); reaps ``p``."""
    _signal_group(p, signal.SIGTERM)
    try:
        p.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(p, signal.SIGKILL)
    p.wait()


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, sig)


def _tail(lines: list) -> list:
    return [ln for ln in lines if "━" not in ln][-TAIL_LINES:]


def time_row(row: Row, runner: Runner, timeout_s: float, scratch: Path) -> dict:
    """Run ``row``'s steps through ``runner`` within ``timeout_s`` seconds in all; returns the row's
    JSON record: ``row, job, target_s, wall_s, target_over_measured`` (None unless ``ok``), ``status``
    (``ok``, ``failed`` or ``timeout``), ``exit_code``, ``last_stderr_line``, ``last_stdout_line``,
    ``commands``, ``env`` (overrides), ``triton_cache``, ``artifact_cache``, ``steps``, ``cpu_s`` (None
    unless every step's is known), ``load_before`` (1-minute load average at the start); row d also ``sweep``."""
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (_package_root(), os.environ.get("PYTHONPATH"))))}
    load = round(os.getloadavg()[0], 2)
    results, left = [], timeout_s
    for step in row.steps:
        if left <= 0:
            results.append(StepResult(0.0, None, True))
            break
        r = runner(step.argv, {**base, **step.env}, step.cwd, left)
        results.append(r)
        left -= r.wall_s
        if r.timed_out or r.exit_code != 0:
            break
    last = results[-1]
    status = "timeout" if last.timed_out else ("failed" if last.exit_code != 0 else "ok")
    wall = sum(r.wall_s for r in results)
    rec = {
        "row": row.key,
        "job": row.job,
        "target_s": row.target_s,
        "wall_s": round(wall, 2),
        "cpu_s": None if any(r.cpu_s is None for r in results) else round(sum(r.cpu_s for r in results), 2),
        "load_before": load,
        "target_over_measured": _ratio(row.target_s, wall) if status == "ok" else None,
        "status": status,
        "exit_code": last.exit_code,
        "last_stderr_line": next((ln for r in reversed(results) for ln in reversed(r.stderr_tail)), None),
        "last_stdout_line": next((ln for r in reversed(results) for ln in reversed(r.stdout_tail)), None),
        "commands": [_shown(s, scratch) for s in row.steps],
        "env": {k: v.replace(str(scratch), SCRATCH) for s in row.steps for k, v in s.env.items()},
        "triton_cache": row.triton_cache,
        "artifact_cache": row.artifact_cache,
        "log": _row_log(results),
        "steps": [
            {
                "command": _shown(s, scratch),
                "wall_s": round(r.wall_s, 2),
                "cpu_s": None if r.cpu_s is None else round(r.cpu_s, 2),
                "exit_code": r.exit_code,
                "timed_out": r.timed_out,
            }
            for s, r in zip(row.steps, results)
        ],
    }
    if row.sweep_part:
        m = next((m for r in results for ln in r.stdout_tail if (m := SWEEP_TIMING.search(ln))), None)
        secs = float(m.group(2)) if m else None
        rec["sweep"] = {
            "cells": int(m.group(1)) if m else None,
            "wall_s": secs,
            "target_s": SWEEP_TARGET_S,
            "target_over_measured": _ratio(SWEEP_TARGET_S, secs) if secs is not None else None,
            "source": "the sweep's own line 'computed N cells in X s'",
        }
    return rec


def _row_log(results: list) -> list:
    """Every step's stamped lines as ``"<seconds since the row started> <line>"`` (steps run one after the other)."""
    out, start = [], 0.0
    for r in results:
        out += [f"{start + t:7.1f} {ln}" for t, ln in r.stamped]
        start += r.wall_s
    return out


def _ratio(target: float, measured: float) -> Optional[float]:
    return round(target / measured, 3) if measured > 0 else None


def _package_root() -> str:
    """The folder holding the ``conformance`` package the subprocesses must import (this one)."""
    return str(Path(conformance.__file__).resolve().parents[1])


def _shown(step: Step, scratch: Path) -> str:
    """The step as a shell line: its env overrides first, ``python`` for the interpreter, :data:`SCRATCH` for
    the scratch folder (the row's working folder is its own, under that folder)."""
    argv = ["python" if i == 0 and a == sys.executable else a for i, a in enumerate(step.argv)]
    line = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in step.env.items()), shlex.join(argv)])
    return line.replace(str(scratch), SCRATCH)


def git_commit(root: Optional[str] = None) -> Optional[dict]:
    """``{"commit": hash, "dirty": bool}`` (tracked files changed) of the git checkout whose top level is
    ``root`` (default: the package root); None outside one or without git."""
    root = root or _package_root()
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() != Path(root).resolve():
            return None
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        return {"commit": _git(root, "rev-parse", "HEAD"), "dirty": bool(status)}
    except OSError:
        return None


def _git(root: str, *args: str) -> Optional[str]:
    p = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=60)
    return p.stdout.strip() if p.returncode == 0 else None


def run_main_job(
    rows: Optional[str],
    out_root: Path,
    timeout_s: float,
    cold_artifacts: bool = False,
    *,
    cuda: Optional[bool] = None,
    runner: Runner = run_subprocess,
    rows_factory: Callable[[Path, bool], dict] = build_rows,
    log=print,
) -> tuple[dict, dict]:
    """Time the rows ``rows`` (``--rows`` text; None: this machine's) one after the other, each within
    ``timeout_s`` seconds, in a scratch folder removed afterwards; write ``<out_root>/<device
    slug>/main_job.{json,md}`` atomically. Returns (the JSON document, {"json": path, "md": path}).
    Raises Int8confError (one line) for a bad ``rows`` or an unusable ``out_root``, before any row runs."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    keys = select_rows(rows, cuda)
    env = environment()
    out = Path(out_root) / device_slug(env["device"])
    with removed_if_refused(out):
        ensure_out_dir(out, "--out", files=[JSON_NAME, MD_NAME])
    git = git_commit()
    scratch = Path(tempfile.mkdtemp(prefix="int8conf-main-job-"))
    try:
        table = rows_factory(scratch, cold_artifacts)
        records = []
        for k in keys:
            log(f"{k}  {table[k].job}: running (limit {timeout_s:g} s)")
            rec = time_row(table[k], runner, timeout_s, scratch) | {"git": git}
            log_name = f"main_job-{k}.log"
            atomic_write_text(out / log_name, "\n".join(rec["log"]) + "\n")
            rec["log"] = log_name
            records.append(rec)
            log(_line(rec))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    doc = {
        "environment": env,
        "git": git,
        "device": env["device"],
        "cuda": cuda,
        "cold_artifacts": cold_artifacts,
        "timeout_s": timeout_s,
        "timing": "wall seconds of each row's subprocess(es), start to exit (Python start-up included), one row "
        "after the other, each in a scratch folder of its own, PYTHONPATH starting with this conformance package's "
        "folder; target_over_measured = target / measured (>= 1 meets the target); cpu_s: user + system seconds "
        "of the row's processes (on a shared machine wall seconds stretch, CPU seconds much less); load_before: "
        "the 1-minute load average when the row started",
        "rows": records,
    }
    paths = {"json": out / JSON_NAME, "md": out / MD_NAME}
    doc = with_earlier_rows(doc, _read_json(paths["json"]))
    atomic_write_json(paths["json"], doc, indent=1)
    atomic_write_text(paths["md"], render_markdown(doc))
    return doc, paths


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def with_earlier_rows(doc: dict, earlier: Optional[dict]) -> dict:
    """``doc`` with the rows of an earlier document of the same device that this run did not time
    (a device session's time limit splits the rows over calls), each keeping the commit it was measured
    at (``git``, the earlier document's when the row has none); rows come in :data:`ROWS` order. An unreadable or foreign ``earlier`` adds nothing."""
    if not earlier or earlier.get("device") != doc["device"] or not isinstance(earlier.get("rows"), list):
        return doc
    mine = {r["row"] for r in doc["rows"]}
    kept = [r | {"git": r.get("git", earlier.get("git"))} for r in earlier["rows"] if r.get("row") not in mine]
    order = {k: i for i, k in enumerate(ROWS)}
    return doc | {"rows": sorted(doc["rows"] + kept, key=lambda r: order.get(r["row"], len(order)))}


def _fmt(v, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec)


def _line(rec: dict) -> str:
    """One printed line: figure, target, ratio, result."""
    s = (
        f"{rec['row']}  {rec['job']}: {rec['wall_s']:.1f} s (target <= {rec['target_s']:g} s, "
        f"target/measured {_fmt(rec['target_over_measured'], '.2f')}) {_result(rec)}"
    )
    sw = rec.get("sweep")
    if sw:
        s += f"; sweep alone {_fmt(sw['wall_s'])} s (target <= {sw['target_s']:g} s, target/measured {_fmt(sw['target_over_measured'], '.2f')})"
    return s


def _result(rec: dict) -> str:
    if rec["status"] == "timeout":
        return "TIMED OUT"
    return "ok" if rec["status"] == "ok" else f"FAILED (exit {rec['exit_code']})"


def render_markdown(doc: dict) -> str:
    """main_job.md: the set-up line, the table of rows (pandas + tabulate), each row's commands and last lines."""
    git = doc["git"]
    env = doc["environment"]
    commit = (
        f"commit {git['commit'][:12]}{' (tracked files changed)' if git['dirty'] else ''}" if git else "no git checkout"
    )
    lines = [
        f"# int8conf bench --main-job: {doc['device']}",
        "",
        f"{commit}; torch {env['torch']}, triton {env['triton']}, {env['cpu_count']} CPUs; limit {doc['timeout_s']:g} s "
        f"per row; artifact cache {'fresh per row (--cold-artifacts)' if doc['cold_artifacts'] else 'kept'}. "
        f"Timing: {doc['timing']}.",
        "",
    ]
    table = pd.DataFrame(
        [
            {
                "row": r["row"],
                "job": r["job"],
                "wall s": _fmt(r["wall_s"]),
                "CPU s": _fmt(r["cpu_s"]),
                "target s": f"<= {r['target_s']:g}",
                "target/measured": _fmt(r["target_over_measured"], ".2f"),
                "result": _result(r),
                "Triton cache": r["triton_cache"],
                "artifact cache": r["artifact_cache"],
                "load before": _fmt(r["load_before"], ".2f"),
                "commit": (r.get("git") or {}).get("commit", "")[:12] or "—",
            }
            for r in doc["rows"]
        ]
    )
    lines += [table.to_markdown(index=False, disable_numparse=True) if len(table) else "_(no rows)_", ""]
    for r in doc["rows"]:
        lines.append(f"- **{r['row']}**: " + " && ".join(f"`{c}`" for c in r["commands"]))
        sw = r.get("sweep")
        if sw:
            lines.append(
                f"  - sweep alone ({sw['source']}): {_fmt(sw['wall_s'])} s for {sw['cells']} cells "
                f"(target <= {sw['target_s']:g} s, target/measured {_fmt(sw['target_over_measured'], '.2f')})"
            )
        ended = "stopped at the limit" if r["status"] == "timeout" else f"exit {r['exit_code']}"
        last = f"`{r['last_stderr_line']}`" if r["last_stderr_line"] else "none"
        lines.append(f"  - {ended}; last stderr line: {last}")
        if isinstance(r.get("log"), str):
            lines.append(
                f"  - every output line stamped with its second since the row started: [{r['log']}]({r['log']})"
            )
    return "\n".join(lines) + "\n"
