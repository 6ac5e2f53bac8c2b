"""pytest plugin: ``pytest --int8conf-kernel=NAME`` (or ``--kernel=NAME``) runs the conformance suite (``pytest11``
entry point ``int8conf``; without a kernel it adds nothing; ``-p no:int8conf`` keeps it out of a run).

Options: ``--int8conf-kernel`` (repeatable; ``all``, ``pkg.module:function`` or an entry point),
``--int8conf-against`` (pairwise items), ``--int8conf-inject``; the short names ``--kernel``, ``--against``,
``--inject`` are aliases added after the initial conftests load, only where no conftest or plugin took the name
(:func:`pytest_load_initial_conftests`); ``--int8conf-reports=DIR`` (``DIR/<kernel>/conformance.{json,md}``, checked at
configure: an unusable one is a usage error), ``--int8conf-examples``, ``--int8conf-threads``
(``conformance.runtime.threads``), ``--int8conf-no-model``, ``--int8conf-no-tile-edges``,
``--int8conf-captures`` / ``--int8conf-model``, ``--int8conf-no-captures``, ``--int8conf-timeout=S``;
``--int8conf-inject FAULT[:COVERAGE[:SEED]]`` is mutation testing (the suite runs on ``faults.inject(kernel, ...)``).
After a failing session (not an injected kernel's, not a stopped one) the controller triages each failing kernel's run
as ``int8conf check`` does (``conformance.triage.run.triage_result`` on the cases it built at configure, the same plan
as the workers'): its report carries "Where the bug lives", the terminal summary a line per check;
``--int8conf-no-triage`` turns it off.

Every kernel call runs in a forked child (``conformance.suite.workers.Containment``): a kernel that kills its
process or hangs (no result within ``--int8conf-timeout`` seconds, default 600; C7 / E1 at least 1800) fails that item with the signal or
the stack and a reproducer (``<reports>/<kernel>/repro/<case>/``); the session goes on and writes the report. A
run that leaves out part of the default suite (the options above, ``-k`` / ``-m`` deselection) says so in its
verdict ("PASS on a reduced suite: ... skipped"); a stopped one says PARTIAL.

Items ``int8conf-<kernel>::<item>`` follow the suite's plan (``conformance.suite.plan.suite_steps``).
A kernel failure fails its item; a precondition violation passes with a :class:`PreconditionWarning`
(silently on a precondition case); a case the kernel cannot run on, or whose checks are all n/a, is
skipped. Results travel to the xdist controller on each item's report (``conformance.runtime.xdist_ship``),
so a stopped run still reports what finished, marked partial. With ``--kernel`` and no paths only
the suite is collected. The fixture ``int8conf_kernel`` hands the kernel under test (F6 / F7
re-injected with ``prepared=False``) to the user's own tests; without ``--kernel`` it skips.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from conformance.checks.result import Verdict
from conformance.kernels.spec import enter_conformance_run
from reference.command_line import call_seconds, non_negative_int, positive_int, remove_empty_dirs
from reference.errors import Int8confError

# The heavy imports (torch, the suite) stay inside the hooks: this plugin loads in every pytest run.


class PreconditionWarning(UserWarning):
    """A case violates a precondition of exact, order-free accumulation (C3 / C4)."""


class ConformanceFailure(AssertionError):
    """A conformance item failed; the message is the evidence lines."""


@dataclass
class _State:
    kernels: list  # conformance.suite.plan.SuiteState per kernel (x injection)
    against: object
    out_dir: Path
    examples: int
    model_checks: bool
    triage: bool = True
    long_items: int = 1  # kernel-level checks + property tests collected (they may run at once under xdist)
    written: list = field(default_factory=list)
    made: list = field(default_factory=list)  # report folders configure created, deepest first


_STATE = pytest.StashKey[_State]()
#: the short aliases another plugin or conftest registered first (:func:`pytest_load_initial_conftests`)
_TAKEN = pytest.StashKey[set]()
_ITEM_KEY = "int8conf_result"
GROUP = "int8conf"
#: old option spellings -> the new ones (each still works, after a one-line note on stderr)
DEPRECATED = {"--int8conf-no-sweep": "--int8conf-no-tile-edges"}
#: ``--int8conf-X`` -> (its short alias, argparse attributes): registered always, the alias where it is free
_SHARED = {
    "--int8conf-kernel": (
        "--kernel",
        dict(
            dest="int8conf_kernel",
            action="append",
            default=[],
            metavar="NAME",
            help="run the conformance suite for kernel NAME (repeatable; 'all' = every "
            "built-in available here; or pkg.module:function)",
        ),
    ),
    "--int8conf-against": (
        "--against",
        dict(
            dest="int8conf_against",
            default=None,
            metavar="OTHER",
            help="add pairwise bit-agreement items against kernel OTHER",
        ),
    ),
    "--int8conf-inject": (
        "--inject",
        dict(
            dest="int8conf_inject",
            action="append",
            default=[],
            metavar="FAULT[:COVERAGE[:SEED]]",
            help="inject a fault into every --int8conf-kernel (repeatable): FAULT {faults}, COVERAGE one, 1%% or "
            "all (default all), SEED integer (default 0); e.g. F4:all",
        ),
    ),
}


def pytest_addoption(parser, pluginmanager) -> None:
    import conformance.gate.pytest_gate as gate_plugin

    if not pluginmanager.is_registered(gate_plugin):
        pluginmanager.register(gate_plugin, "int8conf-gate")
    g = parser.getgroup(GROUP, "int8conf kernel conformance")
    for long, (_, attrs) in _SHARED.items():
        g.addoption(long, **_with_fault_choices(attrs))
    g.addoption(
        "--int8conf-reports",
        default=None,
        metavar="DIR",
        help="directory for <kernel label>/conformance.{json,md} (default: int8conf-reports/check)",
    )
    g.addoption(
        "--int8conf-examples",
        type=non_negative_int,
        default=25,
        metavar="N",
        help="hypothesis examples in the property test (default 25; 0 = none)",
    )
    g.addoption(
        "--int8conf-threads",
        type=positive_int,
        default=None,
        metavar="N",
        help="torch CPU threads per process running items, at most its cores "
        "(default: its share of the cores, cores // xdist workers)",
    )
    g.addoption(
        "--int8conf-no-model", action="store_true", help="skip the model-level checks (C7 token_flip, E1 engine_hash)"
    )
    g.addoption(
        "--int8conf-no-tile-edges",
        "--int8conf-no-sweep",  # the old spelling, deprecated (DEPRECATED)
        dest="int8conf_no_tile_edges",
        action="store_true",
        help="skip the tile-edge shapes and the trigger-condition case families",
    )
    g.addoption(
        "--int8conf-captures",
        default=None,
        metavar="DIR",
        help="replay this capture directory (default: the default model's captures)",
    )
    g.addoption(
        "--int8conf-model",
        default=None,
        metavar="DIR",
        help="parent model directory of --int8conf-captures, when it moved since capture",
    )
    g.addoption("--int8conf-no-captures", action="store_true", help="skip layer-capture replay (synthetic cases only)")
    g.addoption(
        "--int8conf-no-serving",
        action="store_true",
        help="skip the serving checks C13 graph_replay, C14 compile, C15 streams_devices (CUDA kernels)",
    )
    g.addoption(
        "--int8conf-no-triage",
        action="store_true",
        help="after a failing run, do not search where each failing check's first failing case switches on (by "
        "default, as int8conf check: in the report's 'Where the bug lives' and the terminal summary)",
    )
    g.addoption(
        "--int8conf-timeout",
        type=call_seconds,
        default=600.0,
        metavar="S",
        help="seconds a case, a property example, C9 or C11 may take before the kernel's process is killed "
        "(default 600); C7 and E1, whole-model replays, get at least 1800 s; a crash or a hang fails that item, with "
        "a reproducer; after a first hung case each later case gets max(60, 20 x the slowest answered) s, at most S",
    )


def _with_fault_choices(attrs: dict) -> dict:
    """``attrs`` with ``{faults}`` in its help replaced by the fault catalogue's ids (``faults.spec.fault_choices``)."""
    if "{faults}" not in attrs.get("help", ""):
        return attrs
    from faults.spec import fault_choices

    return dict(attrs, help=attrs["help"].replace("{faults}", fault_choices()))


def _option_names(parser) -> set:
    """Every option string registered on ``parser`` so far (pytest lists its groups in no public API: ``_anonymous``
    and ``_groups``, pytest 8 and 9)."""
    groups = [getattr(parser, "_anonymous", None), *getattr(parser, "_groups", [])]
    return {name for g in groups if g is not None for opt in g.options for name in opt.names()}


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Once the initial conftests have added their options: the short alias of each :data:`_SHARED` option
    (``--kernel``, ``--against``, ``--inject``) where no conftest or plugin registered that name; a name already
    taken is left to its owner (``--int8conf-kernel`` always works; :func:`pytest_report_header` says so where the
    command line used the taken name)."""
    result = yield
    taken = _option_names(parser)
    g = parser.getgroup(GROUP)
    early_config.stash[_TAKEN] = {short for short, _ in _SHARED.values() if short in taken}
    for long, (short, attrs) in _SHARED.items():
        if short not in taken:
            g.addoption(short, **dict(attrs, help=f"alias of {long} (where no conftest defines {short})"))
    return result


def pytest_report_header(config) -> list:
    """One line per short alias (``--kernel``, ``--against``, ``--inject``) that another plugin or conftest owns
    here while the command line gives it and not its ``--int8conf-`` form: the run then runs no int8conf item."""
    args = [str(a) for a in config.invocation_params.args]

    def given(opt: str) -> bool:
        return any(a == opt or a.startswith(opt + "=") for a in args)

    return [
        f"int8conf: {short} belongs to another plugin or conftest here; use {long}=X"
        for long, (short, _) in _SHARED.items()
        if short in config.stash.get(_TAKEN, set()) and given(short) and not given(long)
    ]


def _share_cores(config) -> None:
    """Set torch's CPU threads where items run (``--int8conf-threads``, else this process's share
    of the cores); an xdist controller, which runs no item, only validates. Raises pytest.UsageError."""
    from conformance.runtime.threads import available_cores, torch_threads

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    try:
        n = torch_threads(
            config.getoption("int8conf_threads"), available_cores(), workers, os.environ, option="--int8conf-threads"
        )
    except Int8confError as e:
        raise pytest.UsageError(f"int8conf: {e}") from None
    controller = not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))
    if n is not None and not controller:
        import torch

        torch.set_num_threads(n)


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "int8conf: a generated kernel-conformance item")
    names = config.getoption("int8conf_kernel", default=[]) or []
    if not names:
        if config.getoption("int8conf_inject", default=[]):
            raise pytest.UsageError(
                "int8conf: --inject needs --kernel=NAME (--int8conf-inject, --int8conf-kernel: the kernel to inject "
                "the fault into)"
            )
        if config.getoption("int8conf_against", default=None):
            raise pytest.UsageError(
                "int8conf: --against needs --kernel=NAME (--int8conf-against: the kernel compared pairwise with it)"
            )
        return
    if not hasattr(config, "workerinput"):  # the controller says it once
        for old, new in DEPRECATED.items():
            if any(str(a).startswith(old) for a in config.invocation_params.args):
                print(f"int8conf: note: {old} is deprecated, use {new}", file=sys.stderr)
    _share_cores(config)
    enter_conformance_run()
    from conformance.kernels.loader import cwd_on_sys_path
    from conformance.runtime.graceful_stop import record_interrupts, sigterm_as_interrupt_in_pytest
    from conformance.runtime.output_dirs import command_root
    from conformance.runtime.xdist_ship import merge_on_controller
    from conformance.suite.plan import SuiteState, cli_capture_message, reduced_suite
    from conformance.suite.setup import CaseSource, RunCases, against_kernel, kernel_report_dir, kernel_runs
    from conformance.suite.workers import Containment, containment_ok

    # the `pytest` console script puts its own folder, not the invocation
    # directory, on sys.path: --kernel=mod:fn must find mod.py where pytest runs
    cwd_on_sys_path(config.invocation_params.dir)
    opt = config.getoption
    if opt("int8conf_captures") and opt("int8conf_no_captures"):
        raise pytest.UsageError(
            "int8conf: --int8conf-captures=DIR and --int8conf-no-captures contradict each other: give one of them"
        )
    source = CaseSource(
        not opt("int8conf_no_captures"),
        not opt("int8conf_no_tile_edges"),
        opt("int8conf_captures") or None,
        opt("int8conf_model"),
    )
    try:
        runs = kernel_runs(names, opt("int8conf_inject", default=[]) or [])
        other = against_kernel(opt("int8conf_against"), [s for s, _ in runs])
        cases_of = RunCases(source, full_size=False)  # every xdist worker builds its own cases
        built = {s.name: cases_of.for_kernel(s, inj) for s, inj in runs}
    except Int8confError as e:
        msg = cli_capture_message(e).replace("--model DIR", "--int8conf-model=DIR")
        raise pytest.UsageError(f"int8conf: {msg}") from None
    out = Path(opt("int8conf_reports") or command_root("check"))
    if not out.is_absolute():
        out = Path(config.invocation_params.dir) / out
    made = [] if hasattr(config, "workerinput") else _check_report_dirs(out, [s for s, _ in runs])
    examples, model_checks = int(opt("int8conf_examples")), not opt("int8conf_no_model")

    serving = not opt("int8conf_no_serving")

    def skipped(spec) -> list:
        return reduced_suite(
            not opt("int8conf_no_captures"),
            not opt("int8conf_no_tile_edges"),
            examples,
            model_checks,
            spec.operands,
            serving_checks=serving,
            kind=spec.kind,
        )

    kernels = [SuiteState(s, *built[s.name], other, skipped=skipped(s), serving_checks=serving) for s, _ in runs]
    if containment_ok() is None:  # the child starts with the first item that calls the kernel
        for ks in kernels:
            repro = kernel_report_dir(out, ks.spec.name) / "repro"
            ks.contained = Containment(ks, opt("int8conf_timeout"), repro)
    config.stash[_STATE] = _State(
        kernels=kernels,
        against=other,
        out_dir=out,
        made=made,
        examples=examples,
        model_checks=model_checks,
        triage=not opt("int8conf_no_triage"),
    )
    if not hasattr(config, "workerinput"):  # xdist workers find the controller's compiled kernels on disk
        for st in config.stash[_STATE].kernels:
            st.warm_up(lambda line: print(f"int8conf: {line}", flush=True), config.stash[_STATE].examples)
    merge_on_controller(config, _ITEM_KEY, lambda delta: _merge(config, delta))
    sigterm_as_interrupt_in_pytest(config)
    record_interrupts()  # every process running items: a kernel's own KeyboardInterrupt is its failure


def _check_report_dirs(out: Path, specs) -> list:
    """``make_report_dirs`` for ``--int8conf-reports``; raises pytest.UsageError (one line)."""
    from conformance.suite.setup import make_report_dirs

    try:
        return make_report_dirs(out, [s.name for s in specs], "--int8conf-reports")
    except Int8confError as e:
        raise pytest.UsageError(f"int8conf: {e}") from None


def _fixture_spec(spec):
    """The spec handed to user tests: F6 / F7 re-injected with ``prepared=False``."""
    from faults import inject, injection_of, wrapped_kernel

    inj = injection_of(spec)
    if inj is None or inj.fault not in ("F6", "F7") or not inj.prepared:
        return spec
    return inject(wrapped_kernel(spec), inj.fault, inj.coverage, inj.seed, prepared=False)


def pytest_generate_tests(metafunc) -> None:
    """Parametrize ``int8conf_kernel`` over the kernels under test."""
    st = _state(metafunc.config)
    if "int8conf_kernel" not in metafunc.fixturenames or st is None:
        return
    specs = [_fixture_spec(ks.spec) for ks in st.kernels]
    metafunc.parametrize("int8conf_kernel", specs, ids=[s.name for s in specs])


@pytest.fixture
def int8conf_kernel(request):
    """The KernelSpec under test (``--kernel``, ``--inject`` applied); skipped without ``--kernel``."""
    if not hasattr(request, "param"):
        pytest.skip("int8conf_kernel: no --kernel given")
    return request.param


def _state(config) -> Optional[_State]:
    return config.stash.get(_STATE, None)


def pytest_ignore_collect(collection_path, config):
    """With --kernel and no explicit paths, collect only the conformance suite."""
    if _state(config) is not None and config.args_source != pytest.Config.ArgsSource.ARGS:
        return True
    return None


def _invocation(config) -> dict:
    args = [str(a) for a in config.invocation_params.args]
    return {"command": "pytest " + shlex.join(args), "options": {"args": args}}


class KernelSuite(pytest.Collector):
    """Collector of one kernel's conformance items, in the plan's order."""

    def __init__(self, *, kstate, st: _State, **kw):
        super().__init__(**kw)
        self.kstate, self.st = kstate, st

    def collect(self):
        from conformance.suite.plan import CASE, CHECK, PAIR

        kinds = {CASE: CaseItem, PAIR: PairItem, CHECK: CheckItem}
        ks, st = self.kstate, self.st
        for step in ks.steps(st.examples, st.model_checks, st.against is not None):
            yield kinds.get(step.kind, PropertyItem).from_parent(self, name=step.name, kstate=ks, st=st, step=step)


class _Item(pytest.Item):
    def __init__(self, *, kstate, st: _State, step, **kw):
        super().__init__(**kw)
        self.kstate, self.st, self.step = kstate, st, step
        self.add_marker("int8conf")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return f"int8conf-{self.kstate.spec.name}", None, self.name

    def result_delta(self) -> tuple:
        """``(kernel index, kind, key, value)``: what this item added, for the xdist controller."""
        k, ks = self.st.kernels.index(self.kstate), self.kstate
        if isinstance(self, CheckItem):
            return k, "model", self.step.check_id, ks.model.get(self.step.check_id)
        if isinstance(self, PropertyItem):
            return k, "property", None, (ks.prop_cases, ks.property)
        return k, "case", self.step.index, ks.results.get(self.step.index)


def _crash_message(what: str, rec: dict) -> str:
    """The failure of an item whose kernel call crashed or hung: the line, the child's stack, the reproducer."""
    lines = [f"{what}: {rec['status'].upper()}: {rec['line']}"]
    stack = [x for x in rec.get("log_tail") or [] if x.strip()][:12]
    if stack:
        lines += ["  the kernel's process (faulthandler):", *[f"    {x}" for x in stack]]
    if rec.get("repro"):
        lines.append(f"  reproducer: {rec['repro']}/command.sh")
    return "\n".join(lines)


def _check_verdict(r) -> None:
    if r.verdict == Verdict.NOT_APPLICABLE:
        pytest.skip(r.summary)
    if r.verdict == Verdict.FAIL and isinstance(r.evidence.get("crash"), dict):
        raise ConformanceFailure(_crash_message(f"{r.check_id} {r.name}", r.evidence["crash"]))
    if r.verdict == Verdict.FAIL:
        raise ConformanceFailure(f"{r.check_id} {r.name}: {r.summary}")


class CaseItem(_Item):
    """Checks C1-C6, C8 (and C10) on one fixed case."""

    def runtest(self):
        name = self.kstate.spec.name
        cr = self.kstate.evaluate(self.step.index)
        if cr.crash is not None:
            raise ConformanceFailure(_crash_message(f"{cr.case} ({name})", cr.crash))
        if cr.kernel_failures:
            raise ConformanceFailure(f"{cr.case} ({name}):\n  " + "\n  ".join(cr.failure_lines()))
        if cr.not_run_reason is not None:  # C3/C4 ran on the reference only
            pytest.skip(f"{name}: {cr.not_run_reason}")
        for r in cr.precondition_violations:
            warnings.warn(PreconditionWarning(f"{name} {cr.case}: {r.check_id} {r.name}: {r.summary}"), stacklevel=2)
        if all(r.verdict == Verdict.NOT_APPLICABLE for r in cr.checks.values()):
            pytest.skip("; ".join(sorted({r.summary for r in cr.checks.values()})))


class PropertyItem(_Item):
    """Hypothesis property test under the declared contract."""

    def runtest(self):
        ks = self.kstate
        prop = ks.run_property(self.st.examples)
        if prop.get("skipped"):
            pytest.skip(prop["skipped"])
        crashed = [cr for cr in ks.prop_cases if cr.crash is not None]
        if crashed:
            raise ConformanceFailure(_crash_message(f"property test, {crashed[0].case}", crashed[0].crash))
        if prop.get("failed"):
            raise ConformanceFailure(f"property test failed: {prop.get('failure')}")
        reasons = {cr.not_run_reason for cr in ks.prop_cases}
        if ks.prop_cases and None not in reasons:  # no example ran: nothing verified
            pytest.skip(f"{ks.spec.name}: property test not run: {sorted(reasons)[0]}")


class CheckItem(_Item):
    """A kernel-level check: C9 batch_invariance, C11, C13-C15 (graph replay, compile, streams), C7, E1. Under xdist
    it runs with the cores shared among the long items (:func:`conformance.runtime.threads.torch_threads` for as many
    workers as kernel-level checks and property tests were collected; ``--int8conf-threads`` and the environment
    still rule): xdist starts them at once (:func:`long_items_first`), and each with every core's thread would
    oversubscribe the cores once the cases are done (C7, E1, C9 ran 10-20 times slower than in ``int8conf check``)."""

    def runtest(self):
        import torch

        from conformance.runtime.threads import available_cores, torch_threads

        before = torch.get_num_threads()
        share = self.st.long_items if hasattr(self.config, "workerinput") else 1
        n = torch_threads(self.config.getoption("int8conf_threads"), available_cores(), share, os.environ)
        if n is not None and hasattr(self.config, "workerinput"):
            torch.set_num_threads(n)
        try:
            _check_verdict(self.kstate.run_check(self.step.check_id))
        finally:
            torch.set_num_threads(before)


class PairItem(_Item):
    """Bit agreement with ``--against`` on one fixed case."""

    def runtest(self):
        cr = self.kstate.evaluate(self.step.index)
        p = cr.pair or {}
        if cr.not_run_reason is not None and p.get("status") == "error":
            pytest.skip(f"{self.kstate.spec.name}: {cr.not_run_reason}")
        if p.get("status") == "error":
            raise ConformanceFailure(f"{cr.case}: {p.get('error')}")
        if p.get("status") == "differ-unexpected":
            w = p.get("worst", {})
            raise ConformanceFailure(
                f"{cr.case}: {self.kstate.spec.name} and {self.st.against.name} differ at "
                f"{p['n_elements'] - p['n_equal']}/{p['n_elements']} elements (max "
                f"{p['max_ulp']} ulp, worst {w.get('index')}: {w.get('out_bits')} vs "
                f"{w.get('ref_bits')}) although {p['reason']}"
            )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    st = _state(config)
    if st is None:
        return
    from conformance.suite.plan import CHECK, PROPERTY

    new = []
    for ks in st.kernels:
        name = f"int8conf-{ks.spec.name}"
        got = list(KernelSuite.from_parent(session, name=name, nodeid=name, kstate=ks, st=st).collect())
        # reported like collected items, so "collected N items" counts them
        config.hook.pytest_collectreport(
            report=pytest.CollectReport(nodeid=name, outcome="passed", longrepr=None, result=got)
        )
        new.extend(got)
    st.long_items = max(1, sum(it.step.kind in (CHECK, PROPERTY) for it in new))
    items[:0] = long_items_first(new) if hasattr(config, "workerinput") else new


def long_items_first(items: list) -> list:
    """An xdist worker's item order: the long items (the kernel-level checks and the property test: C7, E1, C9)
    spread over the first quarter of the list, a quarter of it over their count apart, between the captured-layer
    cases and then the other cases by M*N*K, largest first. xdist's load scheduling starts each worker on a run of
    consecutive items from the first quarter: each long item then starts at once on a worker of its own, and the
    largest cases are spread over the workers. A deterministic order: every worker collects the same list, as
    xdist requires."""
    from conformance.suite.plan import CHECK, PROPERTY

    def cost(it) -> tuple:
        ops = it.kstate.cases[it.step.index]
        return (0, 0) if (ops.meta or {}).get("source") == "capture" else (1, -ops.m * ops.n * ops.k)

    long = [it for it in items if it.step.kind in (CHECK, PROPERTY)]
    out = sorted((it for it in items if it.step.kind not in (CHECK, PROPERTY)), key=cost)
    gap = len(items) // (4 * max(1, len(long))) + 1
    for j, it in enumerate(long):
        out.insert(min(j * gap, len(out)), it)
    return out


def _cuda_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 -- torch missing or broken: no GPUs, never a failing pytest start
        return 0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` with several GPUs: one worker per GPU (else xdist's default)."""
    if config.getoption("int8conf_kernel", default=None) or config.getoption("gate_candidate", default=None):
        n = _cuda_count()
        if n > 1:
            return n
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: give each worker its GPU index where several exist."""
    n = _cuda_count()
    if n > 1:
        wid = node.workerinput.get("workerid", "gw0")
        node.workerinput["int8conf_gpu"] = int(wid[2:] or 0) % n


def pytest_runtest_setup(item) -> None:
    """A stop whose KeyboardInterrupt Python discarded (``graceful_stop``) is raised here."""
    if isinstance(item, _Item):
        from conformance.runtime.graceful_stop import raise_if_requested

        raise_if_requested()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """xdist worker: the item's result rides on its call-phase report."""
    outcome = yield
    if call.when == "call" and isinstance(item, _Item) and hasattr(item.config, "workerinput"):
        from conformance.runtime.xdist_ship import attach

        attach(outcome.get_result(), _ITEM_KEY, item.result_delta())


def _merge(config, delta) -> None:
    """xdist controller: one item's shipped ``(kernel index, kind, key, value)``."""
    st = _state(config)
    if st is None:
        return
    k, kind, key, value = delta
    ks = st.kernels[k]
    if kind == "case" and value is not None:
        ks.results[key] = value
    elif kind == "property":
        ks.prop_cases, ks.property = value
    elif kind == "model" and value is not None:
        ks.model[key] = value


def pytest_sessionfinish(session, exitstatus) -> None:
    st = _state(session.config)
    if st is None or hasattr(session.config, "workerinput"):  # xdist workers ship, the controller writes
        return
    from conformance.runtime.partial_run import partial_run
    from conformance.suite.plan import NOT_REACHED, NOT_SELECTED
    from conformance.suite.report import write_reports
    from conformance.suite.run import build_result
    from conformance.suite.setup import kernel_report_dir, report_root
    from conformance.triage.run import triage_result
    from faults.inject import annotate_result

    pending = []  # the failing runs to triage, once every report is on disk
    for ks in st.kernels:
        if not ks.results and not ks.prop_cases and not ks.model:
            continue
        # a Ctrl-C / SIGTERM stop is partial even when every fixed case ran
        stopped = exitstatus == pytest.ExitCode.INTERRUPTED
        part = partial_run(len(ks.results), len(ks.cases), kind="plugin", interrupted=stopped)
        res = build_result(
            ks.spec,
            ks.case_results(),
            ks.captures,
            list(ks.model.values()),
            ks.property,
            st.against if any(c.pair for c in ks.results.values()) else None,
            time.perf_counter() - ks.t0,
            notes=ks.notes() + (ks.contained.notes() if ks.contained is not None else []),
            invocation=_invocation(session.config),
            partial=part,
            warm_up=ks.warm,
            skipped=ks.skipped + ks.missing(st.examples, st.model_checks, NOT_REACHED if stopped else NOT_SELECTED),
        )
        annotate_result(res, ks.spec)
        jp, mp = write_reports(res, report_root(st.out_dir, ks.spec.name))
        st.written.append((ks.spec.name, res, jp, mp))
        if st.triage and not stopped and res.verdict == Verdict.FAIL:
            pending.append((ks, res))
    # as int8conf check: the searches run in children of this process, from the cases it built (the same plan as
    # the workers'); each report is rewritten with its triage
    for ks, res in pending:
        repro = kernel_report_dir(st.out_dir, ks.spec.name) / "repro"
        res.triage = triage_result(ks.spec, res, ks.cases, repro_dir=repro)
        if res.triage:
            write_reports(res, report_root(st.out_dir, ks.spec.name))
    if exitstatus == pytest.ExitCode.OK and any(r.verdict == Verdict.NOT_RUN for _, r, _, _ in st.written):
        # all items skipped reads as green in CI; a kernel that never ran verified nothing
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    st = _state(config)
    if st is None or not st.written:
        return
    from conformance.suite.report import CONSOLE_CRASHES, crash_lines, pair_difference_line, triage_summary

    terminalreporter.section("int8conf conformance reports")
    for name, res, jp, mp in st.written:
        ov = res.overall
        if res.verdict == Verdict.NOT_RUN:
            head = "NOT RUN (inconclusive: the kernel produced output on no case)"
        else:
            head = ov.get("headline") or res.verdict.upper()
            if ov.get("cases_not_run"):
                head += f" ({ov['cases_not_run']} of {ov['cases_total']} cases not run)"
        if (res.partial or {}).get("partial"):  # a stopped or cut-short run never reads as an overall verdict
            head = f"PARTIAL RUN ({res.partial['note']}): {head} over what finished"
            terminalreporter.write_line(f"{name}: {head}  {jp}  {mp}")
        else:
            terminalreporter.write_line(f"{name}: overall {head}  {jp}  {mp}")
        for line in crash_lines(ov, CONSOLE_CRASHES):
            terminalreporter.write_line(f"  {line}")
        if (res.kernel or {}).get("injection"):
            terminalreporter.write_line(f"  {res.notes[0]}")
        line = pair_difference_line(res.pairwise) if res.pairwise else ""
        if line:
            terminalreporter.write_line("  " + line.replace("`", ""))
        for line in triage_summary(res.triage):
            terminalreporter.write_line(f"  {line}")


def pytest_unconfigure(config) -> None:
    from conformance.runtime.graceful_stop import restore_interrupts, restore_sigterm

    restore_sigterm()
    restore_interrupts()
    st = _state(config)
    for ks in st.kernels if st is not None else ():
        if ks.contained is not None:  # the kernel's child process
            ks.contained.close()
    if st is not None:  # a run that wrote no report (--collect-only, nothing selected) leaves no empty folder
        remove_empty_dirs(st.made)
