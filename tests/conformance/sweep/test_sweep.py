"""The sweep: store, executors (serial, Dask LocalCluster), resumability
after a real SIGKILL, and the null fault never firing."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from holding import Hold
from waiting import wait_until

from conformance.sweep.cells import Cell, SweepSpec, layer_cells
from conformance.sweep.distributed import run_cells
from conformance.sweep.runner import SweepTask
from conformance.sweep.store import CellRows, StoreError, SweepStore

ROOT = Path(__file__).resolve().parents[3]
LAYER = "model.layers.0.self_attn.k_proj"  # the smallest captured layer: 64 x 384 x 128


def _spec():
    from reference.model.capture import default_capture_set

    cs = default_capture_set()
    if cs is None:
        pytest.skip("default captures not built")
    return SweepSpec(
        "cpu", "digest", str(cs.dir), cs.model_digest, "", {"windows": 1, "window_len": 8}, model_checks=False
    )


def _row(check, verdict, mode="own"):
    return {
        "scale_mode": mode,
        "check_id": check,
        "verdict": verdict,
        "failure_kind": "kernel" if verdict == "fail" else None,
        "summary": "s",
        "evidence": {"max_ulp": 1},
    }


def test_a_finished_cell_is_never_stored_twice_and_another_sweep_is_refused(tmp_path):
    db = tmp_path / "s.sqlite"
    cell = Cell.from_key(LAYER, "F4", "all", "own", 0)
    cr = CellRows(cell, [_row("C8", "fail"), _row("C6", "pass")], {"changed": 3})
    with SweepStore(db, {"kernel": "cpu"}) as s:
        assert s.put(cr) is True
        assert s.put(cr) is False
        assert len(s.rows()) == 2
        assert s.done() == {cell.key}
    with pytest.raises(StoreError, match="holds a sweep of kernel 'cpu'"):
        SweepStore(db, {"kernel": "triton"})


def test_a_refused_store_names_what_differs_and_an_unusable_path_says_so(tmp_path):
    """New-user pass: a store of another C7 / model-check setting was refused
    with both identities printed alike (the differing field not among them)."""
    db = tmp_path / "s.sqlite"
    with SweepStore(db, {"kernel": "cpu", "model_checks": False, "c7": {"windows": 8, "e1_tokens": 8}}):
        pass
    with pytest.raises(
        StoreError,
        match=r"holds a sweep of kernel 'cpu' that differs from this one "
        r"\(model_checks: False there, True here\): use another",
    ):
        SweepStore(db, {"kernel": "cpu", "model_checks": True, "c7": {"e1_tokens": 8, "windows": 8}})
    (tmp_path / "d.sqlite").mkdir()  # a directory where the file should be
    with pytest.raises(
        StoreError,
        match=r"sweep store .*/d.sqlite: cannot create or open it "
        r"\(unable to open database file\)",
    ):
        SweepStore(tmp_path / "d.sqlite", {"kernel": "cpu"})
    (tmp_path / "f").write_text("a file, not a directory")
    with pytest.raises(StoreError, match=r"sweep store .*/f/x.sqlite: cannot create its directory"):
        SweepStore(tmp_path / "f" / "x.sqlite", {"kernel": "cpu"})


def test_the_record_of_runs_keeps_a_stopped_run_with_its_exact_cell_count(tmp_path):
    """RunLog: a run stopped by an exception is closed as interrupted; a run
    killed without a word (entry left ``running``) is closed by the next run
    with the cells stored since it began; a run that finished with nothing to do
    is dropped; one interrupted before its first cell keeps its wall time."""
    from types import SimpleNamespace

    from conformance.sweep.runlog import RunLog, read_runs

    cells = [Cell.from_key(LAYER, f, "all", "own", 0) for f in ("F1", "F2", "F3", "F4")]
    with SweepStore(tmp_path / "r.sqlite", {"kernel": "cpu"}) as s:
        a = RunLog.start(s, skipped=0)
        a.executor("serial (this process)")  # known before any cell
        s.put(CellRows(cells[0], [_row("C8", "pass")], {}))
        a.heartbeat(1)
        a.interrupt()  # e.g. KeyboardInterrupt
        RunLog.start(s, skipped=1)  # then killed: stays "running"
        for c in cells[1:3]:
            s.put(CellRows(c, [_row("C8", "pass")], {}))
        c = RunLog.start(s, skipped=3)
        s.put(CellRows(cells[3], [_row("C8", "pass")], {}))
        runs = c.finish(SimpleNamespace(computed=1, elapsed_s=0.5, executor="serial"))
        assert runs == read_runs(s)
        RunLog.start(s, skipped=4).finish(SimpleNamespace(computed=0, elapsed_s=0.1, executor="serial"))
        early = RunLog.start(s, skipped=4)
        early._t0 -= 17.0  # 17 s of start-up, then Ctrl-C
        early.interrupt()
        RunLog.start(s, skipped=4)  # killed before its first cell: no time
        RunLog.start(s, skipped=4).finish(SimpleNamespace(computed=0, elapsed_s=0.1, executor="serial"))
        runs = read_runs(s)
    assert [(r["status"], r["computed"], r["stored_before"]) for r in runs] == [
        ("interrupted", 1, 0),
        ("interrupted", 2, 1),
        ("complete", 1, 3),
        ("interrupted", 0, 4),
    ]
    assert 17.0 <= runs[3]["wall_s"] < 20.0
    assert runs[2]["executor"] == "serial" and runs[2]["cells_per_s"] == 2.0
    assert runs[0]["executor"] == "serial (this process)" and runs[1]["executor"] is None


def test_a_store_edited_outside_int8conf_is_refused_with_one_line(tmp_path):
    import sqlite3

    def fresh(name):
        db = tmp_path / name
        with SweepStore(db, {"kernel": "cpu"}) as s:
            for fault in ("F4", "F8"):
                s.put(
                    CellRows(
                        Cell.from_key(LAYER, fault, "all", "own", 0),
                        [_row("C8", "fail"), _row("C6", "pass")],
                        {"changed": 3},
                    )
                )
        return db

    def edit(db, sql):
        con = sqlite3.connect(db)
        with con:
            con.execute(sql)
        con.close()

    db = fresh("verdict.sqlite")
    edit(db, "UPDATE results SET verdict = 'bogus' WHERE fault = 'F4' AND check_id = 'C8'")
    with pytest.raises(
        StoreError,
        match=r"has verdict 'bogus' \(not pass, fail or n/a\): the "
        r"store was modified outside int8conf",
    ):
        SweepStore(db)
    db = fresh("short.sqlite")
    edit(db, "DELETE FROM results WHERE fault = 'F8' AND check_id = 'C6'")
    with pytest.raises(
        StoreError,
        match=r"cell \('model.layers.0.self_attn.k_proj', 'F8', 'all', "
        r"'own', 0\) has 1 result rows, the other layer cells 2",
    ):
        SweepStore(db, {"kernel": "cpu"})  # refused on resume too, before any cell is skipped
    db = fresh("orphan.sqlite")
    edit(db, "DELETE FROM cells WHERE fault = 'F4'")
    with pytest.raises(StoreError, match=r"result rows of cell .*'F4'.* without the cell itself"):
        SweepStore(db)


def _tasks(faults, coverages=("all",)):
    spec = _spec()
    return [SweepTask(c, spec) for c in layer_cells([LAYER], faults, list(coverages), ["own", "pow2"], [0])]


def test_local_cluster_gives_the_serial_rows_and_scorecard_and_f8_never_fires(tmp_path):
    pytest.importorskip("dask.distributed")
    from dask.distributed import LocalCluster

    from conformance.sweep import scorecard
    from predictions.lock import latest_locked, matrix_chain

    tasks = _tasks(["F4", "F8", "F9"])
    with SweepStore(tmp_path / "serial.sqlite", {"t": 1}) as s:
        st = run_cells(tasks, s, workers=1, quiet=True)
        serial = s.rows(deterministic_only=True)
    assert st.computed == 6
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        SweepStore(tmp_path / "dask.sqlite", {"t": 1}) as s,
    ):
        st = run_cells(tasks, s, cluster=cluster, quiet=True)
        dask_rows = s.rows(deterministic_only=True)
    assert st.executor.startswith("dask.distributed")
    assert dask_rows == serial
    chain = matrix_chain(latest_locked("int8"))
    mats = {m.id: m for m in chain}
    meta = {"kernel": "cpu"}
    a = scorecard.build(serial, mats, meta)
    b = scorecard.build(dask_rows, mats, meta)
    assert a["table"].equals(b["table"])
    # the null fault never fires, F4 fires C8 in both scale modes, F9 fires C2 under own scales
    by = {(r["fault"], r["scale_mode"], r["check_id"]): r["verdict"] for r in serial}
    assert all(v != "fail" for (f, _, _), v in by.items() if f == "F8")
    assert by[("F4", "own", "C8")] == by[("F4", "pow2", "C8")] == "fail"
    assert by[("F4", "pow2", "C5")] == "fail" and by[("F4", "own", "C6")] == "pass"
    assert by[("F9", "own", "C2")] == "fail"


def test_threads_give_the_serial_rows_and_memo_scopes_are_per_thread(tmp_path):
    """The threaded executor (several (layer, scale mode) batches at once in
    one process, each in its own memo scope) stores exactly the serial rows."""
    from reference.model.capture import default_capture_set

    spec = _spec()
    names = default_capture_set().layer_names()
    # F6 / F7 carry recipe digests in the memo (their case_digest): per-thread scopes keep them
    tasks = [
        SweepTask(c, spec)
        for c in layer_cells(names[:3], ["F1", "F4", "F6", "F7", "F8", "F9"], ["one", "all"], ["own", "pow2"], [0])
    ]
    with SweepStore(tmp_path / "serial.sqlite", {"t": 1}) as s:
        run_cells(tasks, s, workers=1, quiet=True)
        serial = s.rows(deterministic_only=True)
    with SweepStore(tmp_path / "threads.sqlite", {"t": 1}) as s:
        st = run_cells(tasks, s, workers=1, threads=3, quiet=True)
        threaded = s.rows(deterministic_only=True)
    assert st.computed == 72 and st.executor == "threads of this process: 3"
    assert threaded == serial


def test_a_memo_scope_is_seen_by_its_own_thread_only():
    import threading

    import torch

    from reference import memo

    t = torch.ones(3)
    seen = {}

    def other():
        seen["active"] = memo.active()
        seen["value"] = memo.cached("k", (t,), lambda: "other")

    with memo.scope():
        assert memo.cached("k", (t,), lambda: "mine") == "mine"
        th = threading.Thread(target=other)
        th.start()
        th.join()
        assert memo.cached("k", (t,), lambda: "again") == "mine"
    assert seen == {"active": False, "value": "other"}


def test_threads_are_refused_for_the_interpreter_and_with_other_executors(capsys, tmp_path):
    from conformance.cli import main
    from reference.errors import Int8confError

    assert main(["sweep", "--kernel", "triton", "--linears", "1", "--threads", "2", "--no-score", "--quiet"]) == 2
    assert "--threads 2: kernel 'triton' does not run on CUDA here" in capsys.readouterr().err
    assert (
        main(
            ["sweep", "--kernel", "cpu", "--linears", "1", "--threads", "2", "--workers", "3", "--no-score", "--quiet"]
        )
        == 2
    )
    assert "drop --workers 3" in capsys.readouterr().err
    # the library refuses it too (the interpreter's rows came out wrong in threads)
    spec = _spec()
    tasks = [
        SweepTask(c, SweepSpec("triton", "d", spec.capture_dir, spec.capture_digest, "", spec.c7, model_checks=False))
        for c in layer_cells([LAYER], ["F8"], ["one"], ["own", "pow2"], [0])
    ]
    with (
        SweepStore(tmp_path / "t.sqlite", {"t": 1}) as s,
        pytest.raises(Int8confError, match="kernel 'triton' does not run on CUDA here"),
    ):
        run_cells(tasks, s, workers=1, threads=2, quiet=True)
    # the built-in cpu kernel (pure torch) may run in threads from the command line
    assert (
        main(
            [
                "sweep",
                "--kernel",
                "cpu",
                "--linears",
                "1",
                "--inject",
                "F8",
                "--coverages",
                "one",
                "--no-model",
                "--threads",
                "2",
                "--no-score",
                "--quiet",
                "--db",
                str(tmp_path / "c.sqlite"),
            ]
        )
        == 0
    )
    with SweepStore(tmp_path / "c.sqlite") as s:
        assert json.loads(s.meta("runs"))[0]["executor"] == "threads of this process: 2"


def test_a_second_writer_of_one_store_is_refused_and_the_lock_goes_with_the_first(tmp_path):
    db = tmp_path / "s.sqlite"
    with SweepStore(db, {"kernel": "cpu"}) as a:
        a.claim_writer()
        with (
            SweepStore(db, {"kernel": "cpu"}) as b,
            pytest.raises(
                StoreError,
                match=rf"sweep store {db} is being written by another "
                rf"sweep \(pid {os.getpid()} on ",
            ),
        ):
            b.claim_writer()
    with SweepStore(db, {"kernel": "cpu"}) as c:  # released with the first store's close
        c.claim_writer()


def test_the_sweep_command_on_a_store_being_written_says_so_and_leaves_nothing(tmp_path, capsys):
    from conformance.cli import main
    from reference.model.capture import default_capture_set

    if default_capture_set() is None:
        pytest.skip("default captures not built")
    db = tmp_path / "s.sqlite"
    args = [
        "sweep",
        "--kernel",
        "cpu",
        "--linears",
        "1",
        "--inject",
        "F8",
        "--coverages",
        "one",
        "--no-model",
        "--workers",
        "1",
        "--db",
        str(db),
        "--out",
        str(tmp_path / "o" / "p"),
    ]
    assert main(args) == 0  # the store exists, with this sweep's identity
    capsys.readouterr()
    with SweepStore(db) as other:
        other.claim_writer()  # another sweep is writing it
        assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().endswith("give this run another --db")
    assert f"sweep store {db} is being written by another sweep (pid {os.getpid()} on " in err
    import shutil

    shutil.rmtree(tmp_path / "o")
    with SweepStore(db) as other:
        other.claim_writer()
        assert main(args) == 2
    assert not (tmp_path / "o").exists()  # a refused run creates no output directory


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return [sys.executable, "-m", "conformance.cli", "sweep", "--no-model", "--workers", "1", "--quiet", *args], env


def _cells(db):
    if not Path(db).is_file():
        return 0
    try:
        with sqlite3.connect(str(db), timeout=5) as c:
            return c.execute("SELECT COUNT(*) FROM cells").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_sweep_killed_by_sigkill_resumes_without_loss_to_the_uninterrupted_scorecard(tmp_path):
    """SIGKILL while the kernel call of a layer-6 cell is held (layer 1's cells stored before it):
    the same command resumes and stores exactly the cells an uninterrupted run stores."""
    if _spec() is None:
        return
    sweep = ["--kernel", "holding:spec", "--linears", "1,6", "--inject", "F4,F8", "--coverages", "one,all"]
    total = 2 * 2 * 2 * 2
    db = tmp_path / "killed.sqlite"
    hold = Hold(tmp_path / "hold")
    cmd, _ = _cli(*sweep, "--db", str(db), "--out", str(tmp_path / "a"))
    proc = subprocess.Popen(cmd, env=hold.env(ROOT), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        hold.wait_held()  # a layer-6 cell is reached and not stored
        wait_until(lambda: _cells(db) >= 1, "a stored cell")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        hold.release()
        proc.kill()
    done_at_kill = _cells(db)
    assert 0 < done_at_kill < total, "the kill must land part-way"
    env = dict(hold.env(ROOT), INT8CONF_HOLD_DIR="")  # no hold from here on
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _cells(db) == total
    # the killed run stays in the store's record of runs, with exactly the cells it stored
    with SweepStore(db) as s:
        runs = json.loads(s.meta("runs"))
    assert [(x["status"], x["computed"]) for x in runs] == [
        ("interrupted", done_at_kill),
        ("complete", total - done_at_kill),
    ]
    assert runs[1]["skipped"] == done_at_kill and runs[1]["stored_before"] == done_at_kill
    from conformance.cli import main

    full = ["sweep", "--no-model", "--workers", "1", "--quiet", *sweep]  # in-process: no hold
    assert main([*full, "--db", str(tmp_path / "full.sqlite"), "--out", str(tmp_path / "b")]) == 0
    with SweepStore(db) as a, SweepStore(tmp_path / "full.sqlite") as b:
        assert a.rows(deterministic_only=True) == b.rows(deterministic_only=True)
    assert (tmp_path / "a/stopper/scorecard.csv").read_text() == (tmp_path / "b/stopper/scorecard.csv").read_text()
    # no absolute path of this machine in the scorecard (database, captures, model, command)
    from machine_paths import absolute_strings, machine_paths

    card = tmp_path / "b/stopper"
    text = "".join((card / f).read_text() for f in ("scorecard.json", "scorecard.md", "scorecard.csv"))
    assert machine_paths(text, tmp_path) == []
    meta = json.loads((card / "scorecard.json").read_text())["meta"]
    assert absolute_strings(meta) == [] and meta["capture_dir"] == "reference/model/assets/captures"


def test_sweep_refuses_a_tampered_matrix_before_computing(tmp_path, capsys):
    import shutil

    from conformance.cli import main

    d = tmp_path / "pred"
    d.mkdir()
    for f in ("v1.yaml", "LOCK"):
        shutil.copy(ROOT / "predictions" / f, d / f)
    (d / "v1.yaml").write_text((d / "v1.yaml").read_text().replace('"fire"', '"silent"', 1))
    rc = main(
        [
            "sweep",
            "--kernel",
            "cpu",
            "--linears",
            "1",
            "--no-model",
            "--quiet",
            "--predictions",
            str(d / "v1.yaml"),
            "--db",
            str(tmp_path / "x.sqlite"),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "does not match its lock" in err[0]
    assert not (tmp_path / "x.sqlite").exists()


def test_a_store_given_alone_keeps_its_scorecard_beside_it_and_a_bad_out_is_refused_first(tmp_path, capsys):
    from conformance.cli import main

    committed = ROOT / "reports" / "sweep" / "cpu" / "scorecard.json"
    before = committed.stat().st_mtime_ns if committed.exists() else None
    db = tmp_path / "slice" / "x.sqlite"
    rc = main(
        [
            "sweep",
            "--kernel",
            "cpu",
            "--linears",
            "1",
            "--inject",
            "F8",
            "--coverages",
            "one",
            "--scale-modes",
            "own",
            "--no-model",
            "--quiet",
            "--db",
            str(db),
        ]
    )
    assert rc == 0
    assert (tmp_path / "slice" / "scorecard.json").is_file()
    assert (committed.stat().st_mtime_ns if committed.exists() else None) == before
    blocker = tmp_path / "file"
    blocker.write_text("x")
    capsys.readouterr()
    rc = main(
        [
            "sweep",
            "--kernel",
            "cpu",
            "--linears",
            "1",
            "--inject",
            "F8",
            "--coverages",
            "one",
            "--no-model",
            "--quiet",
            "--db",
            str(tmp_path / "y.sqlite"),
            "--out",
            str(blocker / "sub"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--out" in err[0] and "cannot create" in err[0]
    assert not (tmp_path / "y.sqlite").exists()
    # a store under a file (no --out): the option named is --db, not --out (new-user pass)
    rc = main(
        [
            "sweep",
            "--kernel",
            "cpu",
            "--linears",
            "1",
            "--inject",
            "F8",
            "--coverages",
            "one",
            "--no-model",
            "--quiet",
            "--db",
            str(blocker / "z.sqlite"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"int8conf: error: --db {blocker}: exists and is not a directory"]


def test_a_db_that_is_a_text_file_or_a_folder_is_refused_naming_db(tmp_path, capsys):
    """Re-check pass 2026-12-01g: the refusal named the path but not the option."""
    from conformance.cli import main

    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    (tmp_path / "adir").mkdir()
    for db, why in ((notes, "is not a sweep store"), (tmp_path / "adir", "cannot create or open")):
        rc = main(
            [
                "sweep",
                "--kernel",
                "cpu",
                "--linears",
                "1",
                "--inject",
                "F8",
                "--coverages",
                "one",
                "--no-model",
                "--quiet",
                "--db",
                str(db),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and err[0].startswith("int8conf: error: --db: ")
        assert str(db) in err[0] and why in err[0]
    assert notes.read_text() == "hello\n" and not (tmp_path / "o").exists()


def test_an_sqlite_database_of_something_else_is_not_taken_as_a_store(tmp_path, capsys):
    """New-user pass: ``--db`` on an SQLite file holding another application's
    tables got the sweep's tables added beside them, exit 0."""
    import sqlite3

    from conformance.cli import main

    db = tmp_path / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE x (a)")
    con.commit()
    con.close()
    with pytest.raises(
        StoreError,
        match=r"is an SQLite database of something else \(tables "
        r"\['x'\]\), not a sweep store: give another --db",
    ):
        SweepStore(db, {"kernel": "cpu"})
    rc = main(
        [
            "sweep",
            "--kernel",
            "cpu",
            "--linears",
            "1",
            "--inject",
            "F8",
            "--coverages",
            "one",
            "--no-model",
            "--quiet",
            "--db",
            str(db),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "something else" in err[0]
    con = sqlite3.connect(db)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master")] == ["x"]  # untouched
    con.close()
    assert not (tmp_path / "o").exists()
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()  # an empty database file is fine
    with SweepStore(empty, {"kernel": "cpu"}) as s:
        assert s.done() == set()


@pytest.mark.parametrize("option", ["--linears", "--inject", "--coverages", "--scale-modes", "--seeds"])
def test_an_empty_list_option_is_an_error_not_the_default(option, capsys):
    """``--layers ""`` used to run every layer (504 cells), silently."""
    from conformance.cli import main

    with pytest.raises(SystemExit) as e:
        main(["sweep", "--kernel", "cpu", option, " , "])
    assert e.value.code == 2
    assert f"argument {option}: empty list: give at least one value" in capsys.readouterr().err


def test_a_slice_on_a_bigger_store_says_its_scorecard_scores_the_whole_store(tmp_path):
    """New-user pass 2026-12-01e: the header named the slice's 2 cells while the
    tables scored all 30 stored ones."""
    from conformance.cli import main

    base = [
        "sweep",
        "--kernel",
        "cpu",
        "--linears",
        "0",
        "--coverages",
        "one",
        "--no-model",
        "--workers",
        "1",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    assert main(base + ["--inject", "F8,F4"]) == 0
    md = (tmp_path / "cpu" / "scorecard.md").read_text()
    assert "- cells: 4 layer cells (1 layers x 2 faults x 1 coverages x 2 scale modes" in md
    assert main(base + ["--inject", "F8", "--scale-modes", "own"]) == 0
    md = (tmp_path / "cpu" / "scorecard.md").read_text()
    assert (
        "- cells scored: every cell in the store, 4 layer cells + 0 model cells (this command "
        "asked for 1 layer cells (1 layers x 1 faults x 1 coverages x 1 scale modes"
    ) in md


def test_without_matplotlib_the_sweep_says_the_heatmap_was_not_written(tmp_path, capsys, monkeypatch):
    """New-user pass: detection.png was silently missing without the plots extra."""
    import sys

    from conformance.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    (tmp_path / "detection.png").write_bytes(b"an older run's picture")  # removed, not kept
    rc = main(
        [
            "sweep",
            "--kernel",
            "cpu",
            "--linears",
            "1",
            "--inject",
            "F8",
            "--coverages",
            "one",
            "--scale-modes",
            "own",
            "--no-model",
            "--db",
            str(tmp_path / "s.sqlite"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and (tmp_path / "scorecard.md").is_file()
    assert not (tmp_path / "detection.png").exists()
    assert ("detection.png not written: matplotlib is not installed (pip install 'int8conf[plots]')") in out


# --- issue 31 item 2: a damaged store is one line, exit 2 -----------------------------

_SMALL = [
    "sweep",
    "--kernel",
    "cpu",
    "--linears",
    "1",
    "--inject",
    "F8",
    "--coverages",
    "one",
    "--scale-modes",
    "own,pow2",
    "--no-model",
    "--workers",
    "1",
    "--quiet",
    "--no-score",
]


def _damaged_line(db, why="database disk image is malformed") -> str:
    return (
        f"int8conf: error: sweep store {db} is damaged ({why}): give a fresh --db PATH, or delete {db} to start it over"
    )


def test_a_damaged_store_is_refused_in_one_line_and_left_as_it_is(tmp_path, capsys):
    from conformance.cli import main
    from reference.model.capture import default_capture_set

    if default_capture_set() is None:
        pytest.skip("default captures not built")
    db = tmp_path / "s.sqlite"
    assert main([*_SMALL, "--db", str(db)]) == 0
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'results'").fetchone()[0]
    con.close()
    with open(db, "r+b") as f:  # the results table's root page: b-tree garbage
        f.seek(page * (root - 1))
        f.write(b"\x0d" + b"\xff" * 200)
    damaged = db.read_bytes()
    capsys.readouterr()
    assert main([*_SMALL, "--db", str(db)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [_damaged_line(db)]
    assert db.read_bytes() == damaged  # nothing rewritten, nothing deleted


def test_damage_found_mid_run_stops_in_one_line_and_keeps_what_was_stored(tmp_path, capsys, monkeypatch):
    """SQLite reports damage lazily, when a damaged page is first touched."""
    from conformance.cli import main
    from reference.model.capture import default_capture_set

    if default_capture_set() is None:
        pytest.skip("default captures not built")
    put_many = SweepStore.put_many
    calls = []

    def second_put_fails(self, crs):
        calls.append(len(crs))
        if len(calls) == 2:
            raise sqlite3.DatabaseError("database disk image is malformed")
        return put_many(self, crs)

    monkeypatch.setattr(SweepStore, "put_many", second_put_fails)
    db = tmp_path / "s.sqlite"
    assert main([*_SMALL, "--db", str(db)]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [_damaged_line(db)]
    monkeypatch.setattr(SweepStore, "put_many", put_many)
    with SweepStore(db) as s:  # the first unit's cells stayed, the run is recorded
        assert len(s.done()) == calls[0] == 1
        assert json.loads(s.meta("runs"))[0]["status"] == "interrupted"
