"""Committed reports name no absolute path of the machine that wrote them:
the conformance report (JSON and Markdown), the pow2 study report; the
sweep scorecard and the scoreboard are checked in their own tests
(tests/conformance/sweep/test_sweep.py, tests/conformance/test_scoreboard.py)."""

from __future__ import annotations

import json
import shutil
import tempfile

import pytest
from machine_paths import absolute_strings, machine_paths

from conformance.suite.report import write_reports
from conformance.suite.run import run_conformance
from reference.fileio import REPO_ROOT, env_prefix

CAPTURES = REPO_ROOT / "reference" / "model" / "assets" / "captures"
COMMITTED_STUDY = REPO_ROOT / "reports" / "pow2" / "cpu-vs-triton"


def _run(tmp_path, capture_dir):
    res = run_conformance(
        "cpu",
        include_tile_edges=False,
        property_examples=0,
        model_checks=False,
        capture_dir=capture_dir,
        max_capture_layers=1,
    )
    jp, mp = write_reports(res, tmp_path / "out")
    return json.loads(jp.read_text()), jp.read_text() + mp.read_text()


@pytest.mark.parametrize("where", ["repository", "elsewhere"])
def test_conformance_report_records_portable_capture_paths(where, tmp_path):
    if not (CAPTURES / "manifest.json").is_file():
        pytest.skip("default captures not built")
    if where == "repository":
        cdir, want = CAPTURES, "reference/model/assets/captures"
    else:  # a capture set copied to a directory of this machine (here under $TMPDIR)
        cdir = tmp_path / "my-captures"
        shutil.copytree(CAPTURES, cdir)
        want = None
    doc, text = _run(tmp_path, cdir)
    assert doc["captures"]["available"] and doc["comparability"]["n_capture_cases"] == 2
    src = doc["captures"]["source"]
    if want:
        assert src == want
    else:
        assert src.startswith(env_prefix("TMPDIR", tempfile.gettempdir()) + "/") and src.endswith("/my-captures")
    assert doc["comparability"]["captures_source"] == src
    assert {c["meta"]["capture_dir"] for c in doc["cases"] if c["source"] == "capture"} == {src}
    assert src in doc["captures"]["note"]
    assert machine_paths(text, tmp_path) == [] and absolute_strings(doc) == []


def test_study_report_records_portable_paths(tmp_path):
    from conformance.study.report import write_report

    if not (COMMITTED_STUDY / "study.json").is_file():
        pytest.skip("no committed study report")
    r = json.loads((COMMITTED_STUDY / "study.json").read_text())
    # as a run on this machine would record them: model and cache paths here
    r["settings"]["model_dir"] = str(REPO_ROOT / "reference/model/assets/default_model")
    r["model"]["dir"] = r["settings"]["model_dir"]
    r["model"]["committed_checkpoint"] = str(tmp_path / "cache/checkpoints/81e4/own")
    write_report(r, tmp_path / "s")
    doc = json.loads((tmp_path / "s" / "study.json").read_text())
    text = (tmp_path / "s" / "study.json").read_text() + (tmp_path / "s" / "study.md").read_text()
    assert doc["settings"]["model_dir"] == "reference/model/assets/default_model"
    assert machine_paths(text, tmp_path) == [] and absolute_strings(doc) == []
