"""``int8conf scoreboard`` on a tiny case set: verdicts, spacing table,
interchangeability, a per-case timeout, reproducers that re-run alone,
merging rows from another machine."""

import json
import tempfile

import pytest

from conformance.cases import make_case
from conformance.kernels.registry import get_kernel
from conformance.scoreboard.board import rerun_repro, run_scoreboard
from conformance.suite.evaluate import evaluate_case
from reference.fileio import env_prefix

TRUNC, SLEEP = "buggy_kernels:truncating_kernel", "scoreboard_kernels:sleeping_kernel"
CRASH = "scoreboard_kernels:crashing_kernel"


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    out = tmp_path_factory.mktemp("sb")
    cases = [make_case("bias", 0), make_case("tails", 0)]
    doc = run_scoreboard(
        out,
        kernels=["cpu", TRUNC, SLEEP, CRASH],
        devices=["cpu"],
        cases=cases,
        case_timeout=8,  # the sleeper hangs for 120 s; the others take milliseconds, even on a loaded machine
        warmup_timeout=120,
        quiet=True,
        jobs=4,
        save_outputs=True,
    )
    return out, doc


def _row(doc, kernel):
    return next(r for r in doc["rows"] if r["kernel"] == kernel)


def test_scoreboard_verdicts_and_tables(board):
    out, doc = board
    assert {p.name for p in out.iterdir()} >= {"scoreboard.json", "scoreboard.md", "scoreboard.png", "repro"}
    assert json.loads((out / "scoreboard.json").read_text())["schema"] == "int8conf.scoreboard"
    assert _row(doc, "cpu")["overall"] == "conformant"
    trunc = _row(doc, TRUNC)
    assert trunc["overall"] == "not conformant" and trunc["checks"]["C8"] == "fail"
    sp = doc["max_spacing_from_standard"]
    assert sp["cpu@cpu"]["w_then_a/fp32_before_round"] == 0
    assert sp["cpu@cpu"]["a_then_w/after_round"] > 0  # the bias case tells the bias points apart
    assert sp[f"{TRUNC}@cpu"]["w_then_a/fp32_before_round"] >= 1
    inter = doc["interchangeability"]
    assert inter["cpu@cpu"]["cpu@cpu"] == {"identical": 2, "shared": 2}
    assert inter["cpu@cpu"][f"{TRUNC}@cpu"]["identical"] < 2
    assert inter["cpu@cpu"][f"{SLEEP}@cpu"] == {"identical": 1, "shared": 1}


def test_a_step_declared_kernel_is_held_to_its_steps_by_c8():
    spec = get_kernel("scoreboard_kernels:step_kernel")
    assert spec.steps.to_list()[2] == "cast bf16"
    assert spec.contract.label() == "a_then_w/bias:fp32_before_round/rne"
    r = evaluate_case(spec, make_case("bias", 0), device="cpu")
    assert r.checks["C8"].verdict == "pass" and "declared steps" in r.checks["C8"].summary
    assert r.checks["C6"].verdict == "fail"  # the bf16 rounding between the scales


def test_a_hanging_case_times_out_and_the_row_continues(board):
    _out, doc = board
    sl = _row(doc, SLEEP)
    assert len(sl["cases_timeout"]) == 1 and "tails" in sl["cases_timeout"][0]
    assert sl["cases_run"] == 1 and sl["overall"] == "timeout"


def test_a_kernel_that_kills_its_process_fails_that_case_only(board):
    _out, doc = board
    cr = _row(doc, CRASH)
    assert cr["cases_failed"] == ["synthetic/tails-s0"] and cr["cases_run"] == 1
    assert cr["overall"] == "not conformant"


def test_every_failure_has_a_reproducer_that_reruns_alone(board):
    out, doc = board
    links = _row(doc, TRUNC)["repro"]
    assert "C8" in links and links["C8"]["minimal"] and links["C8"]["shape"][0] == 1
    ok, line = rerun_repro(out / links["C8"]["file"])
    assert ok and line.startswith(f"{TRUNC}@cpu C8: fail")
    md = (out / "scoreboard.md").read_text()
    assert "(#buggy_kernels_truncating_kernel-cpu-c8)" in md
    assert "### buggy_kernels_truncating_kernel-cpu-C8" in md


def test_merge_adds_rows_from_another_machine(board, tmp_path):
    out, _doc = board
    cases = [make_case("bias", 0), make_case("tails", 0)]
    doc = run_scoreboard(tmp_path, kernels=[], devices=["cpu"], cases=cases, quiet=True, merge=[out])
    keys = [f"{r['kernel']}@{r['device']}" for r in doc["rows"]]
    assert keys == ["cpu@cpu", f"{TRUNC}@cpu", f"{SLEEP}@cpu", f"{CRASH}@cpu"]
    assert doc["interchangeability"]["cpu@cpu"]["cpu@cpu"]["identical"] == 2
    assert (tmp_path / "repro").is_dir() and any((tmp_path / "repro").iterdir())


def test_a_later_merge_replaces_an_earlier_ones_row(board, tmp_path):
    out, _doc = board
    cases = [make_case("bias", 0), make_case("tails", 0)]
    again = tmp_path / "again"  # one row re-run elsewhere (as a CUDA row re-run on the H200)
    run_scoreboard(again, kernels=[TRUNC], devices=["cpu"], cases=cases, quiet=True, save_outputs=True)
    doc = run_scoreboard(tmp_path / "m", kernels=[], devices=["cpu"], cases=cases, quiet=True, merge=[out, again])
    keys = [f"{r['kernel']}@{r['device']}" for r in doc["rows"]]
    assert sorted(keys) == sorted(["cpu@cpu", f"{TRUNC}@cpu", f"{SLEEP}@cpu", f"{CRASH}@cpu"])
    assert _row(doc, TRUNC)["checks"]["C8"] == "fail"
    assert [m.rsplit("/", 1)[-1] for m in doc["environment"]["merged_from"]] == [out.name, "again"]


def test_scoreboard_files_name_no_machine_path(board):
    from machine_paths import absolute_strings, machine_paths

    out, doc = board
    text = (out / "scoreboard.json").read_text() + (out / "scoreboard.md").read_text()
    assert machine_paths(text, out) == []
    assert absolute_strings(json.loads((out / "scoreboard.json").read_text())) == []
    # the reproducer command names the file portably ($TMPDIR/... here)
    cmd = _row(doc, TRUNC)["repro"]["C8"]["command"]
    tmp = env_prefix("TMPDIR", tempfile.gettempdir())  # ${TMPDIR:-/tmp} while TMPDIR is unset
    assert cmd.startswith(f"int8conf scoreboard --repro {tmp}/") and cmd.endswith(".safetensors")
