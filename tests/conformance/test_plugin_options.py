"""The plugin's options in other projects' test runs (issue 42, item 5): ``--int8conf-kernel`` always, ``--kernel``
(``--against``, ``--inject``) only where no conftest defines it; ``-p no:int8conf`` keeps the plugin out."""

from __future__ import annotations

import pytest

from conformance.suite.plan import CHECK  # imported before any in-process run: triton imported after one aborts

pytest_plugins = ["pytester"]

THEIRS = """
def pytest_addoption(parser):
    parser.addoption("--kernel", default="linux", help="their own option")
    parser.addoption("--inject", action="store_true", help="their own flag")
"""

TEST_THEIRS = """
def test_their_option(request):
    assert request.config.getoption("kernel") == "{want}"
    assert request.config.getoption("inject") is {inject}
"""


def test_a_conftest_that_defines_kernel_and_inject_runs_its_own_tests(pytester):
    pytester.makeconftest(THEIRS)
    pytester.makepyfile(TEST_THEIRS.format(want="6.1", inject=True))
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--kernel=6.1", "--inject")
    assert r.ret == pytest.ExitCode.OK, r.outlines
    r.assert_outcomes(passed=1)
    assert not [x for x in r.errlines if "Traceback" in x or "Error" in x]


def test_beside_their_kernel_option_the_long_name_runs_the_suite(pytester):
    pytester.makeconftest(THEIRS)
    theirs = pytester.makepyfile(TEST_THEIRS.format(want="6.1", inject=False))
    fast = ["--int8conf-no-tile-edges", "--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0"]
    args = ["-p", "no:cacheprovider", "--co", "-q", "--int8conf-kernel=cpu", "--kernel=6.1", *fast]
    r = pytester.runpytest_inprocess(*args)
    ids = [line for line in r.outlines if line.startswith("int8conf-cpu::")]
    assert r.ret == pytest.ExitCode.OK, r.outlines
    assert ids[0] == "int8conf-cpu::synthetic/ordinary-s0" and len(ids) == 22 + 4  # the fixed cases, C9, C13-C15
    assert (
        ids[-4:]
        == [
            "int8conf-cpu::C9-batch_invariance",
            "int8conf-cpu::C13-graph_replay",
            "int8conf-cpu::C14-compile",
            "int8conf-cpu::C15-streams_devices",
        ]
        and CHECK == "check"
    )
    # their own test runs beside the suite, its --kernel keeping its own value
    r = pytester.runpytest_inprocess(*[a for a in args if a not in ("--co", "-q")], str(theirs), "-k", "their_option")
    r.assert_outcomes(passed=1, deselected=26)


def test_the_old_no_sweep_spellings_still_skip_the_tile_edge_shapes_after_a_note(pytester):
    """``--int8conf-no-sweep`` / ``--gate-no-sweep`` (before "sweep" named only the fault-injection sweep) set
    ``--int8conf-no-tile-edges`` / ``--gate-no-tile-edges``; the suite prints the deprecation note once."""
    for old, dest in (("--int8conf-no-sweep", "int8conf_no_tile_edges"), ("--gate-no-sweep", "gate_no_tile_edges")):
        assert pytester.parseconfig(old).getoption(dest) is True
        assert pytester.parseconfig().getoption(dest) is False
    fast = ["--int8conf-no-sweep", "--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0"]
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--co", "-q", "--int8conf-kernel=cpu", *fast)
    ids = [line for line in r.outlines if line.startswith("int8conf-cpu::")]
    assert r.ret == pytest.ExitCode.OK and len(ids) == 22 + 4, (
        r.outlines
    )  # 22 cases, C9, C13-C15: as with --int8conf-no-tile-edges
    assert not any("tile_edges/" in i for i in ids)
    note = "int8conf: note: --int8conf-no-sweep is deprecated, use --int8conf-no-tile-edges"
    assert r.errlines.count(note) == 1, r.errlines


def test_where_kernel_is_free_it_is_an_alias_of_the_long_name(pytester):
    pytester.makepyfile("def test_x(request):\n    assert request.config.getoption('int8conf_kernel') == []\n")
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--help")
    text = "\n".join(r.outlines)
    assert "--int8conf-kernel=NAME" in text and "--kernel=NAME" in text and "alias of --int8conf-kernel" in text
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)


def test_p_no_int8conf_keeps_the_plugin_out(pytester):
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:int8conf", "--help")
    text = "\n".join(r.outlines)
    assert r.ret == pytest.ExitCode.OK and "--int8conf-kernel" not in text and "--kernel" not in text


def test_where_their_conftest_owns_kernel_the_header_names_the_long_option(pytester):
    """``--kernel=X`` taken by a conftest runs no int8conf item; the header says what to use."""
    pytester.makeconftest(THEIRS)
    pytester.makepyfile(TEST_THEIRS.format(want="cpu", inject=False))
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--kernel=cpu")
    r.assert_outcomes(passed=1)
    hint = "int8conf: --kernel belongs to another plugin or conftest here; use --int8conf-kernel=X"
    assert hint in r.outlines  # before: no word
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--kernel=cpu", "--int8conf-kernel=cpu", "--co")
    assert hint not in r.outlines
