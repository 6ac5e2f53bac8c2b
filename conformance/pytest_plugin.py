"""pytest plugin: ``pytest --kernel=NAME`` runs the conformance suite.

Registered in the ``pytest11`` entry-point group, so it is active in every
pytest run of an environment where int8conf is installed; without
``--kernel`` it adds nothing and the project's own tests run as usual.

Options:
    --kernel=NAME         kernel to check (repeatable; ``all`` = every built-in
                          available here; ``pkg.module:function``; an
                          ``int8conf.kernels`` entry point). A name that does
                          not resolve is a one-line usage error.
    --against=OTHER       add pairwise interchangeability items vs OTHER.
    --int8conf-reports=DIR  where ``<kernel>/conformance.{json,md}`` go
                          (default ``reports/check``, relative to the invocation dir;
                          each ``DIR/<kernel>`` is made and checked at configure
                          time: an unusable one is a usage error, exit 4).
    --int8conf-examples=N hypothesis examples of the property test (default 25).
    --int8conf-threads=N  torch CPU threads per process running items (default:
                          its share of the cores; see below).
    --int8conf-no-model   skip the model-level checks (C7 token_flip, E1 engine_hash).
    --int8conf-no-sweep   skip the alignment-straddling shape sweep and the
                          trigger-condition case families.
    --int8conf-captures=DIR  replay this capture directory instead of the
                          default model's shipped captures.
    --int8conf-model=DIR  parent model of --int8conf-captures when it moved
                          since the capture was taken.
    --int8conf-no-captures  skip layer-capture replay (synthetic cases only).
    --inject=FAULT[:COVERAGE[:SEED]]  run the suite on ``faults.inject(kernel,
                          ...)`` instead (repeatable; e.g. ``F4:all``,
                          ``output_truncation:1%``, ``F9.stale:one:3``): mutation
                          testing -- failing items show what caught the fault.
                          F6 / F7 cases are prepared by ``faults.prepare_case``.
                          A bad spec is a one-line usage error. The report and
                          the terminal summary name fault, coverage and seed.

torch's CPU threads (``conformance.runtime.threads``): ``--int8conf-threads=N`` per
process running items (at most its cores), else its share of the cores
(``cores // workers`` under pytest-xdist, every core otherwise) unless
``OMP_NUM_THREADS`` (torch's own choice) or ``INT8CONF_WORKER_THREADS=N``
says otherwise.
Each item's result travels to the controller on the item's own report
(``conformance.runtime.xdist_ship``), so a run stopped part-way (Ctrl-C, a CI time
limit) still reports every item that finished, marked as a partial run;
SIGTERM (what ``timeout`` and CI runners send) stops it the same way as
Ctrl-C (``conformance.runtime.graceful_stop``).

Items (node ids ``int8conf-<kernel>::<item>``): one per fixed case
(``synthetic/...``, ``sweep/M..xK..xN..``, ``<layer>[own|pow2]`` for layer
captures) running checks C1-C6 and C8; ``property`` (hypothesis, fixed CI
profile); ``C9-batch_invariance`` (always); ``C7-token_flip`` and
``E1-engine_hash``; with ``--against``, one
``pairwise/<case>`` item per fixed case. Outcomes: a check failing because of
the kernel fails the item (so ``--junitxml`` records it); a precondition
violation (C3 / C4 caused by the operands) passes with a
:class:`PreconditionWarning`, except on a precondition case (one the suite
built to violate it, ``meta["violates"]``), which passes silently; a case the kernel cannot run on here (device,
shape constraints) and an item whose checks are all n/a are skipped with the
reason. The terminal summary says ``NOT RUN`` for a kernel that produced
output on no case, and names the cases where the ``--against`` kernel differs
as allowed by the contracts (the two are then NOT bit-interchangeable). A pairwise item fails only when the two kernels differ where
their declared contracts require identical bits, or one errors.

When ``--kernel`` is given without explicit paths, only the conformance
suite is collected (the ``testpaths`` / current directory are not).
The reports are written at session finish from whatever items ran.

Your own tests: the fixture ``int8conf_kernel`` is the KernelSpec under test,
one parametrization per ``--kernel`` (x ``--inject``), so ``pytest
tests/my_gemm_tests --kernel=mypkg.gemm:scaled_mm --inject=F3:all`` runs our
suite and yours against the same faulty kernel (mutation testing of your
suite). There F6 / F7 extend K inside the wrapper on every call
(``faults.inject(..., prepared=False)``): your tests call the kernel on
their own operands. Without ``--kernel`` a test using the fixture is skipped.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from reference.errors import Int8confError


class PreconditionWarning(UserWarning):
    """A case violates a precondition of exact, order-free accumulation (C3 / C4)."""


class ConformanceFailure(AssertionError):
    """A conformance item failed; the message is the evidence lines."""


@dataclass
class _KernelState:
    spec: object
    cases: list
    captures: object
    results: dict = field(default_factory=dict)
    prop_cases: list = field(default_factory=list)
    property: Optional[dict] = None
    model: dict = field(default_factory=dict)
    t0: float = field(default_factory=time.perf_counter)


@dataclass
class _State:
    kernels: list
    against: object
    out_dir: Path
    examples: int
    model_checks: bool
    written: list = field(default_factory=list)
    made: list = field(default_factory=list)  # report folders configure created, deepest first


_STATE = pytest.StashKey[_State]()


def _non_negative_int(text: str) -> int:
    from reference.command_line import non_negative_int

    return non_negative_int(text)


def _positive_int(text: str) -> int:
    from reference.command_line import positive_int

    return positive_int(text)


def pytest_addoption(parser, pluginmanager) -> None:
    import conformance.gate.pytest_gate as gate_plugin

    if not pluginmanager.is_registered(gate_plugin):
        pluginmanager.register(gate_plugin, "int8conf-gate")
    g = parser.getgroup("int8conf", "int8conf kernel conformance")
    g.addoption(
        "--kernel",
        action="append",
        default=[],
        metavar="NAME",
        help="run the conformance suite for kernel NAME (repeatable; 'all' = every "
        "built-in available here; or pkg.module:function)",
    )
    g.addoption(
        "--against", default=None, metavar="OTHER", help="add pairwise bit-agreement items against kernel OTHER"
    )
    g.addoption(
        "--int8conf-reports",
        default="reports/check",
        metavar="DIR",
        help="directory for <kernel label>/conformance.{json,md} (default: reports/check)",
    )
    g.addoption(
        "--int8conf-examples",
        type=_non_negative_int,
        default=25,
        metavar="N",
        help="hypothesis examples in the property test (default 25; 0 = none)",
    )
    g.addoption(
        "--int8conf-threads",
        type=_positive_int,
        default=None,
        metavar="N",
        help="torch CPU threads per process running items, at most its cores "
        "(default: its share of the cores, cores // xdist workers)",
    )
    g.addoption(
        "--int8conf-no-model", action="store_true", help="skip the model-level checks (C7 token_flip, E1 engine_hash)"
    )
    g.addoption(
        "--int8conf-no-sweep",
        action="store_true",
        help="skip the alignment-straddling shape sweep and the trigger-condition case families",
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
        "--inject",
        action="append",
        default=[],
        metavar="FAULT[:COVERAGE[:SEED]]",
        help="inject a fault into every --kernel (repeatable): FAULT F1..F9 or its name "
        "(F9.stale, F9.transposed: other F9 variants), COVERAGE one, 1%% or all "
        "(default all), SEED integer (default 0); e.g. F4:all",
    )


def _share_cores(config) -> None:
    """Set torch's CPU threads where the items run (``conformance.runtime.threads``:
    ``--int8conf-threads``, else this process's share of the cores among the
    xdist workers); an xdist controller, which runs no item, only validates.

    Raises:
        pytest.UsageError: a bad ``--int8conf-threads`` or ``INT8CONF_WORKER_THREADS``.
    """
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
    names = config.getoption("kernel", default=[]) or []
    if not names:
        if config.getoption("inject", default=[]):
            raise pytest.UsageError("int8conf: --inject needs --kernel=NAME (the kernel to inject the fault into)")
        return
    _share_cores(config)
    import faults  # noqa: F401 -- registers the resolver of injected names (cpu+F4@all#s0)
    from conformance.kernels.loader import cwd_on_sys_path
    from conformance.kernels.registry import get_kernel, resolve_kernels

    # the `pytest` console script puts its own folder, not the invocation
    # directory, on sys.path: --kernel=mod:fn must find mod.py where pytest runs
    cwd_on_sys_path(config.invocation_params.dir)
    from conformance.suite.run import default_cases, load_captures

    try:
        specs = resolve_kernels(list(names))
        runs = _injected(specs, config.getoption("inject", default=[]) or [])
        against = config.getoption("against")
        other = get_kernel(against, "--against") if against else None
        cs = None
        no_cap = config.getoption("int8conf_no_captures")
        if config.getoption("int8conf_captures") and not no_cap:
            cs = load_captures(config.getoption("int8conf_captures"), config.getoption("int8conf_model"))
        cases, cap = default_cases(
            include_captures=not no_cap, include_sweep=not config.getoption("int8conf_no_sweep"), capture_set=cs
        )
    except Int8confError as e:
        from conformance.suite.run import cli_capture_message

        msg = cli_capture_message(e).replace("--model DIR", "--int8conf-model=DIR")
        raise pytest.UsageError(f"int8conf: {msg}") from None
    out = Path(config.getoption("int8conf_reports"))
    if not out.is_absolute():
        out = Path(config.invocation_params.dir) / out
    made = [] if hasattr(config, "workerinput") else _check_report_dirs(out, [s for s, _ in runs])
    config.stash[_STATE] = _State(
        kernels=[_KernelState(s, _prepared(cases, inj, s), cap) for s, inj in runs],
        against=other,
        out_dir=out,
        made=made,
        examples=int(config.getoption("int8conf_examples")),
        model_checks=not config.getoption("int8conf_no_model"),
    )
    from conformance.runtime.xdist_ship import merge_on_controller

    merge_on_controller(config, _ITEM_KEY, lambda delta: _merge(config, delta))
    from conformance.runtime.graceful_stop import sigterm_as_interrupt_in_pytest

    sigterm_as_interrupt_in_pytest(config)


def _check_report_dirs(out: Path, specs) -> list:
    """Make and check every ``<out>/<kernel>/`` the session will write its
    report into (``ensure_out_dir``), so an unusable ``--int8conf-reports``
    is refused before any item runs; on a refusal the folders made here are
    removed again.

    Returns:
        the folders that did not exist before, deepest first (removed at
        unconfigure when the session wrote nothing into them).

    Raises:
        pytest.UsageError: a report folder (or a parent) is a file, cannot
            be created or is not writable, or a report file in it is a
            directory (one line naming the option and the folder).
    """
    from conformance.suite.report import REPORT_FILES, kernel_dirname
    from reference.command_line import ensure_out_dir, removed_if_refused

    dirs = list(dict.fromkeys(out / kernel_dirname(s.name) for s in specs))
    try:
        with removed_if_refused(*dirs) as made:
            for d in dirs:
                ensure_out_dir(d, "--int8conf-reports", files=REPORT_FILES)
    except Int8confError as e:
        raise pytest.UsageError(f"int8conf: {e}") from None
    return made


def _injected(specs, texts) -> list:
    """(spec, Injection or None) per kernel and ``--inject`` value (``faults.inject``).

    Raises:
        Int8confError: a bad ``--inject`` value (one line; becomes a usage error).
    """
    from faults import inject, injection_of, parse_injection

    if not texts:  # a kernel named like cpu+F7@one#s0 is injected already
        return [(s, injection_of(s)) for s in specs]
    injections = [parse_injection(t) for t in texts]
    return [(inject(s, i.fault, i.coverage, i.seed, variant=i.variant), i) for s in specs for i in injections]


def _prepared(cases, inj, spec) -> list:
    """The fixed cases, prepared by ``faults.prepare_case`` for F6 / F7 within
    the kernel's declared shape constraints."""
    if inj is None:
        return cases
    from faults import prepare_case

    return [prepare_case(c, inj.fault, inj.coverage, inj.seed, spec.constraints) for c in cases]


def _fixture_spec(spec):
    """The spec handed to user tests: F6 / F7 re-injected with ``prepared=False``
    (user tests call the kernel on operands nobody prepared)."""
    from faults import inject, injection_of, wrapped_kernel

    inj = injection_of(spec)
    if inj is None or inj.fault not in ("F6", "F7") or not inj.prepared:
        return spec
    return inject(wrapped_kernel(spec), inj.fault, inj.coverage, inj.seed, prepared=False)


def pytest_generate_tests(metafunc) -> None:
    """Parametrize ``int8conf_kernel`` over the kernels under test."""
    if "int8conf_kernel" not in metafunc.fixturenames:
        return
    st = _state(metafunc.config)
    if st is None:
        return
    specs = [_fixture_spec(ks.spec) for ks in st.kernels]
    metafunc.parametrize("int8conf_kernel", specs, ids=[s.name for s in specs])


@pytest.fixture
def int8conf_kernel(request):
    """The KernelSpec under test (``--kernel``, with ``--inject`` applied): one
    parametrization per kernel and injection; skipped without ``--kernel``."""
    if not hasattr(request, "param"):
        pytest.skip("int8conf_kernel: no --kernel given")
    return request.param


def _state(config) -> Optional[_State]:
    return config.stash.get(_STATE, None)


def pytest_ignore_collect(collection_path, config):
    """With --kernel and no explicit paths, collect only the conformance suite."""
    st = _state(config)
    if st is None:
        return None
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return True
    return None


def _invocation(config) -> dict:
    """The pytest command line that produced a report (for its ``invocation``)."""
    import shlex

    args = [str(a) for a in config.invocation_params.args]
    return {"command": "pytest " + shlex.join(args), "options": {"args": args}}


class KernelSuite(pytest.Collector):
    """Collector of one kernel's conformance items."""

    def __init__(self, *, kstate: _KernelState, st: _State, **kw):
        super().__init__(**kw)
        self.kstate, self.st = kstate, st

    def collect(self):
        from conformance.cases import case_id

        ks, st = self.kstate, self.st
        for ops in ks.cases:
            cid = case_id(ops)
            yield CaseItem.from_parent(self, name=cid, kstate=ks, st=st, ops=ops)
        if st.examples > 0:
            yield PropertyItem.from_parent(self, name="property", kstate=ks, st=st)
        yield BatchInvarianceItem.from_parent(self, name="C9-batch_invariance", kstate=ks, st=st)
        if st.model_checks:
            from conformance.checks.result import CHECK_NAMES
            from conformance.suite.run import MODEL_CHECKS

            for cid, _, _ in MODEL_CHECKS:
                yield ModelCheckItem.from_parent(self, name=f"{cid}-{CHECK_NAMES[cid]}", kstate=ks, st=st, check_id=cid)
        if st.against is not None:
            for ops in ks.cases:
                yield PairItem.from_parent(self, name=f"pairwise/{case_id(ops)}", kstate=ks, st=st, ops=ops)


class _Item(pytest.Item):
    def __init__(self, *, kstate: _KernelState, st: _State, **kw):
        super().__init__(**kw)
        self.kstate, self.st = kstate, st
        self.add_marker("int8conf")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return f"int8conf-{self.kstate.spec.name}", None, self.name

    def result_delta(self) -> tuple:
        """``(kernel index, kind, key, value)``: what this item added to its
        kernel's state, for the xdist controller (:func:`_merge`)."""
        raise NotImplementedError

    def _kernel_index(self) -> int:
        return self.st.kernels.index(self.kstate)


def _evaluate(ks: _KernelState, st: _State, ops):
    from conformance.cases import case_id
    from conformance.suite.evaluate import evaluate_case

    cid = case_id(ops)
    if cid not in ks.results:
        ks.results[cid] = evaluate_case(ks.spec, ops, against=st.against)
    return ks.results[cid]


class CaseItem(_Item):
    """Checks C1-C6 and C8 on one fixed case."""

    def __init__(self, *, ops, **kw):
        super().__init__(**kw)
        self.ops = ops

    def result_delta(self) -> tuple:
        from conformance.cases import case_id

        cid = case_id(self.ops)
        return self._kernel_index(), "case", cid, self.kstate.results.get(cid)

    def runtest(self):
        cr = _evaluate(self.kstate, self.st, self.ops)
        if cr.kernel_failures:
            raise ConformanceFailure(f"{cr.case} ({self.kstate.spec.name}):\n  " + "\n  ".join(cr.failure_lines()))
        if cr.not_run_reason is not None:  # C3/C4 ran on the reference only
            pytest.skip(f"{self.kstate.spec.name}: {cr.not_run_reason}")
        for r in cr.precondition_violations:
            warnings.warn(
                PreconditionWarning(f"{self.kstate.spec.name} {cr.case}: {r.check_id} {r.name}: {r.summary}"),
                stacklevel=2,
            )
        if all(r.verdict == "n/a" for r in cr.checks.values()):
            pytest.skip("; ".join(sorted({r.summary for r in cr.checks.values()})))


class PropertyItem(_Item):
    """Hypothesis property test under the declared contract."""

    def result_delta(self) -> tuple:
        ks = self.kstate
        return self._kernel_index(), "property", None, (ks.prop_cases, ks.property)

    def runtest(self):
        from conformance.suite.property import run_property_test

        ks = self.kstate
        ks.prop_cases = []
        ks.property = run_property_test(ks.spec, ks.prop_cases.append, max_examples=self.st.examples)
        if ks.property.get("skipped"):
            pytest.skip(ks.property["skipped"])
        if ks.property.get("failed"):
            raise ConformanceFailure(f"property test failed: {ks.property.get('failure')}")
        reasons = {cr.not_run_reason for cr in ks.prop_cases}
        if ks.prop_cases and None not in reasons:  # no example ran: nothing verified
            pytest.skip(f"{ks.spec.name}: property test not run: {sorted(reasons)[0]}")


class BatchInvarianceItem(_Item):
    """C9 batch_invariance over the kernel's fixed cases (no reference needed)."""

    def result_delta(self) -> tuple:
        return self._kernel_index(), "model", "C9", self.kstate.model.get("C9")

    def runtest(self):
        from conformance.suite.run import run_batch_invariance

        r = run_batch_invariance(self.kstate.spec, self.kstate.cases)
        self.kstate.model["C9"] = r
        if r.verdict == "n/a":
            pytest.skip(r.summary)
        if r.verdict == "fail":
            raise ConformanceFailure(f"{r.check_id} {r.name}: {r.summary}")


class ModelCheckItem(_Item):
    """A model-level check (C7 token_flip / E1 engine_hash)."""

    def __init__(self, *, check_id: str, **kw):
        super().__init__(**kw)
        self.check_id = check_id

    def result_delta(self) -> tuple:
        return self._kernel_index(), "model", self.check_id, self.kstate.model.get(self.check_id)

    def runtest(self):
        from conformance.suite.run import run_model_check

        r = run_model_check(self.check_id, self.kstate.spec)
        self.kstate.model[self.check_id] = r
        if r.verdict == "n/a":
            pytest.skip(r.summary)
        if r.verdict == "fail":
            raise ConformanceFailure(f"{r.check_id} {r.name}: {r.summary}")


class PairItem(CaseItem):
    """Bit agreement with ``--against`` on one fixed case."""

    def runtest(self):
        cr = _evaluate(self.kstate, self.st, self.ops)
        p = cr.pair or {}
        other = self.st.against.name
        if cr.not_run_reason is not None and p.get("status") == "error":
            pytest.skip(f"{self.kstate.spec.name}: {cr.not_run_reason}")
        if p.get("status") == "error":
            raise ConformanceFailure(f"{cr.case}: {p.get('error')}")
        if p.get("status") == "differ-unexpected":
            w = p.get("worst", {})
            raise ConformanceFailure(
                f"{cr.case}: {self.kstate.spec.name} and {other} differ at "
                f"{p['n_elements'] - p['n_equal']}/{p['n_elements']} elements (max "
                f"{p['max_ulp']} ulp, worst {w.get('index')}: {w.get('out_bits')} vs "
                f"{w.get('ref_bits')}) although {p['reason']}"
            )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    st = _state(config)
    if st is None:
        return
    new = []
    for ks in st.kernels:
        name = f"int8conf-{ks.spec.name}"
        col = KernelSuite.from_parent(session, name=name, nodeid=name, kstate=ks, st=st)
        got = list(col.collect())
        # report them like collected items, so the terminal's count ("collected
        # N items", --collect-only's summary) includes them
        config.hook.pytest_collectreport(
            report=pytest.CollectReport(nodeid=name, outcome="passed", longrepr=None, result=got)
        )
        new.extend(got)
    items[:0] = new


def _cuda_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` with several GPUs: one worker per GPU (else xdist's default)."""
    if config.getoption("kernel", default=None) or config.getoption("gate_candidate", default=None):
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


_ITEM_KEY = "int8conf_result"


def pytest_runtest_setup(item) -> None:
    """A stop whose KeyboardInterrupt Python discarded (``graceful_stop``) is
    raised before the next item instead."""
    if isinstance(item, _Item):
        from conformance.runtime.graceful_stop import raise_if_requested

        raise_if_requested()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """xdist worker: the item's result rides on its call-phase report
    (``conformance.runtime.xdist_ship``); the controller merges it as it logs it."""
    outcome = yield
    if call.when == "call" and isinstance(item, _Item) and hasattr(item.config, "workerinput"):
        from conformance.runtime.xdist_ship import attach

        attach(outcome.get_result(), _ITEM_KEY, item.result_delta())


def _merge(config, delta) -> None:
    """xdist controller: one item's shipped ``(kernel index, kind, key, value)``."""
    st = _state(config)
    k, kind, key, value = delta
    if st is None:
        return
    ks = st.kernels[k]
    if kind == "case" and value is not None:
        ks.results[key] = value
    elif kind == "property":
        ks.prop_cases, ks.property = value
    elif kind == "model" and value is not None:
        ks.model[key] = value


def pytest_sessionfinish(session, exitstatus) -> None:
    st = _state(session.config)
    if st is None:
        return
    if hasattr(session.config, "workerinput"):  # an xdist worker: its items shipped their
        return  # results; the controller writes
    from conformance.cases import case_id
    from conformance.runtime.partial_run import partial_run
    from conformance.suite.report import write_reports
    from conformance.suite.run import build_result

    for ks in st.kernels:
        order = {case_id(o): i for i, o in enumerate(ks.cases)}  # case order, serial or not
        ks.results = dict(sorted(ks.results.items(), key=lambda kv: order.get(kv[0], len(order))))
        cases = list(ks.results.values()) + list(ks.prop_cases)
        if not cases and not ks.model:
            continue
        # a Ctrl-C / SIGTERM stop is partial even when every fixed case ran
        # (the property test or a model-level item may be what it cut short)
        part = partial_run(
            len(ks.results), len(ks.cases), kind="plugin", interrupted=exitstatus == pytest.ExitCode.INTERRUPTED
        )
        res = build_result(
            ks.spec,
            cases,
            ks.captures,
            list(ks.model.values()),
            ks.property,
            st.against if any(c.pair for c in ks.results.values()) else None,
            time.perf_counter() - ks.t0,
            invocation=_invocation(session.config),
            partial=part,
        )
        from faults.inject import annotate_result

        annotate_result(res, ks.spec)
        jp, mp = write_reports(res, st.out_dir)
        st.written.append((ks.spec.name, res, jp, mp))
    from conformance.suite.run import NOT_RUN

    if exitstatus == pytest.ExitCode.OK and any(r.verdict == NOT_RUN for _, r, _, _ in st.written):
        # all items skipped reads as green in CI; a kernel that never ran verified nothing
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    st = _state(config)
    if st is None or not st.written:
        return
    from conformance.suite.report import pair_difference_line
    from conformance.suite.run import NOT_RUN

    terminalreporter.section("int8conf conformance reports")
    for name, res, jp, mp in st.written:
        ov = res.overall
        if res.verdict == NOT_RUN:
            head = "NOT RUN (inconclusive: the kernel produced output on no case)"
        else:
            head = res.verdict.upper()
            if ov.get("cases_not_run"):
                head += f" ({ov['cases_not_run']} of {ov['cases_total']} cases not run)"
        terminalreporter.write_line(f"{name}: overall {head}  {jp}  {mp}")
        if (res.kernel or {}).get("injection"):
            terminalreporter.write_line(f"  {res.notes[0]}")
        line = pair_difference_line(res.pairwise) if res.pairwise else ""
        if line:
            terminalreporter.write_line("  " + line.replace("`", ""))


def pytest_unconfigure(config) -> None:
    from conformance.runtime.graceful_stop import restore_sigterm

    restore_sigterm()
    st = _state(config)
    if st is not None:  # a run that wrote no report (--collect-only, nothing selected)
        from reference.command_line import remove_empty_dirs

        remove_empty_dirs(st.made)  # leaves no empty folder
