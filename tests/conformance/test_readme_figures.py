"""README.md's run times come from the committed measurement, not typed (issue 42 item 7): both READMEs hold
``conformance.bench.figures``' block as generated from reports/bench/x86-64/main_job.json."""

from __future__ import annotations

import json

from conformance.bench.figures import BEGIN, END, TARGETS, current_block, figures_block, main, read_source
from reference.fileio import REPO_ROOT


def test_both_readmes_hold_the_generated_figures():
    want = figures_block(read_source())
    for t in TARGETS:
        assert current_block((REPO_ROOT / t).read_text()) == want, f"{t}: run python -m conformance.bench.figures"
    assert "about 6 minutes" not in (REPO_ROOT / "README.md").read_text()  # the typed figure it replaced


def test_the_block_quotes_the_measured_rows(tmp_path):
    doc = {
        "environment": {"cpu_count": 2},
        "rows": [
            {"row": "e", "status": "ok", "wall_s": 134.4, "artifact_cache": "kept", "load_before": 0.5, "cpu_s": 250.2},
            {"row": "f", "status": "timeout", "wall_s": 900.0},
        ],
    }
    block = figures_block(doc).split("\n")
    assert block[0] == BEGIN and block[-1] == END
    assert "**134 s (about 2 minutes)** on 2 CPU cores (250 CPU s;" in block[1] and "load 0.5" in block[1]
    assert block[2].endswith("not measured yet (`int8conf bench --main-job --rows f`)")
    # the rewrite: a README's block follows the measurement
    (tmp_path / "reports" / "bench" / "x86-64").mkdir(parents=True)
    (tmp_path / "reports" / "bench" / "x86-64" / "main_job.json").write_text(json.dumps(doc))
    for t in TARGETS:
        (tmp_path / t).write_text(f"before\n{BEGIN}\nold\n{END}\nafter\n")
    assert main(tmp_path) == 0
    assert (tmp_path / "README.md").read_text() == f"before\n{figures_block(doc)}\nafter\n"
