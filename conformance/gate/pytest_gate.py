"""pytest plugin of the gate: ``pytest --gate-candidate=B --gate-incumbent=A`` (or
``--gate-baseline=REPORT``) ``--gate-policy=FILE [-n auto]``.

One item per case (``gate/<case id>``), per model-level check (``gate/C7``, ``gate/E1``) and per serving check
(``gate/C13``, ``gate/C14``, ``gate/C15``; not with ``--gate-no-serving``), run by ``GateSession``. A blocking case
fails its item, ``warn`` passes with a :class:`GateWarning`, a non-blocking ``not-supported`` (a serving check's
``n/a``) skips. The controller writes ``gate.json`` / ``gate.md`` /
``junit.xml`` once, from Decisions shipped on each item's report (``conformance.runtime.xdist_ship``),
in case order, so ``-n N`` and a stopped run report like a serial one; for a blocked candidate it first triages
the candidate's failing checks (``GateSession.triage``, unless ``--gate-no-triage``), a line per check in the
terminal summary. Without ``--gate-candidate`` it adds nothing."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from reference.errors import Int8confError

_KEY = "int8conf_gate"


class GateWarning(UserWarning):
    """A gate case within the policy but not bit-identical (status ``warn``)."""


class GateFailure(AssertionError):
    """A gate case blocked by the policy; the message is the reasons."""


@dataclass
class _GateState:
    session: object
    out_dir: Path
    decisions: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    serving: dict = field(default_factory=dict)
    written: Optional[dict] = None


_STATE = pytest.StashKey[_GateState]()
#: old option spellings -> the new ones (each still works, after a one-line note on stderr)
DEPRECATED = {"--gate-fault": "--gate-inject", "--gate-no-sweep": "--gate-no-tile-edges"}


def pytest_addoption(parser) -> None:
    g = parser.getgroup("int8conf-gate", "int8conf kernel-swap gate")
    g.addoption(
        "--gate-candidate", metavar="KERNEL", help="gate this kernel against --gate-incumbent / --gate-baseline"
    )
    g.addoption("--gate-incumbent", metavar="KERNEL")
    g.addoption(
        "--gate-baseline", metavar="REPORT", help="the incumbent's stored conformance.json instead of running it"
    )
    g.addoption("--gate-policy", metavar="FILE", help="policy YAML")
    g.addoption(
        "--gate-inject",
        "--gate-fault",  # the old spelling, deprecated
        dest="gate_fault",
        metavar="FAULT[:COVERAGE[:SEED]]",
        help="wrap the candidate with a fault (faults.inject; as --inject of check, gate, sweep, pytest)",
    )
    g.addoption(
        "--gate-out", metavar="DIR", help="report folder (default int8conf-reports/gate/<candidate>-vs-<incumbent>)"
    )
    g.addoption("--gate-timeout", type=float, default=60.0, metavar="S")
    g.addoption("--gate-device", metavar="DEV")
    g.addoption("--gate-no-model", action="store_true", help="skip C7 / E1")
    g.addoption(
        "--gate-no-serving",
        action="store_true",
        help="skip the serving checks C13 graph_replay, C14 compile, C15 streams_devices (as gate --no-serving)",
    )
    g.addoption("--gate-no-captures", action="store_true")
    g.addoption(
        "--gate-no-tile-edges",
        "--gate-no-sweep",  # the old spelling, deprecated
        dest="gate_no_tile_edges",
        action="store_true",
        help="skip the tile-edge shapes and the trigger-condition case families",
    )
    g.addoption("--gate-max-capture-layers", type=int, metavar="N")
    g.addoption(
        "--gate-no-triage",
        action="store_true",
        help="for a blocked candidate, do not search where each check it fails switches on (as int8conf gate "
        "--no-triage)",
    )


def pytest_configure(config) -> None:
    cand = config.getoption("gate_candidate", default=None)
    if not cand:
        return
    from conformance.gate.options import candidate_injection, check_out_dir, default_gate_out
    from conformance.gate.policy import default_policy, load_policy
    from conformance.gate.run import GateOptions, GateSession
    from conformance.runtime.graceful_stop import sigterm_as_interrupt_in_pytest
    from conformance.runtime.pool import KernelRef
    from conformance.runtime.xdist_ship import merge_on_controller

    worker = getattr(config, "workerinput", None) or {}
    gpu, wid = worker.get("int8conf_gpu"), worker.get("workerid")
    dev = config.getoption("gate_device") or (f"cuda:{gpu}" if gpu is not None else None)
    opts = GateOptions(
        include_captures=not config.getoption("gate_no_captures"),
        include_tile_edges=not config.getoption("gate_no_tile_edges"),
        max_capture_layers=config.getoption("gate_max_capture_layers"),
        model_checks=not config.getoption("gate_no_model"),
        serving_checks=not config.getoption("gate_no_serving"),
        timeout_s=config.getoption("gate_timeout"),
        device=dev,
        triage=not config.getoption("gate_no_triage"),
    )
    inc, inject, baseline = (config.getoption(f"gate_{k}") for k in ("incumbent", "fault", "baseline"))
    if not wid:
        for old, new in DEPRECATED.items():
            if any(str(a).startswith(old) for a in config.invocation_params.args):
                print(f"int8conf gate: note: {old} is deprecated, use {new}", file=sys.stderr)
    try:
        injection = candidate_injection(inject)
        out = config.getoption("gate_out")
        if out is None:  # the rule of every command (conformance.runtime.output_dirs)
            out = default_gate_out(cand, injection, inc, baseline)
        out = Path(config.invocation_params.dir) / out  # an absolute ``out`` stays as it is
        if not wid:  # the controller: an unusable --gate-out is refused before any work
            check_out_dir(out, "--gate-out")
        path = config.getoption("gate_policy")
        pol = load_policy(path) if path else default_policy()
        sess = GateSession(KernelRef(cand, injection), KernelRef(inc) if inc else None, baseline, pol, opts, out)
    except Int8confError as e:
        raise pytest.UsageError(f"int8conf gate: {e}") from None
    if wid:
        sess.log_dir = out / "logs" / wid
    config.stash[_STATE] = _GateState(sess, out)
    merge_on_controller(config, _KEY, lambda shipped: _merge(config, shipped))
    sigterm_as_interrupt_in_pytest(config)


def _state(config) -> Optional[_GateState]:
    return config.stash.get(_STATE, None)


def pytest_ignore_collect(collection_path, config):
    """With --gate-candidate and no explicit paths, collect only the gate items."""
    return True if _state(config) is not None and config.args_source != pytest.Config.ArgsSource.ARGS else None


class _GateItem(pytest.Item):
    kind = "case"
    decided = None  # the Decision runtest made (None: it raised before deciding)

    def __init__(self, *, gstate: _GateState, key, **kw):
        super().__init__(**kw)
        self.gstate, self.key = gstate, key  # case index or model check id

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GateFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return "int8conf-gate", None, self.name

    def shipped(self) -> tuple:
        """``(kind, Decision or None)`` of this item, for the xdist controller."""
        return self.kind, self.decided

    def runtest(self):
        s = self.gstate.session
        run = {"case": s.run_case, "serving": s.run_serving, "model": s.run_model}[self.kind]
        d = self.decided = run(self.key)
        _decided(self.gstate, self.kind)[d.item] = d
        self._outcome(d)

    def _outcome(self, d) -> None:
        if d.blocking:
            raise GateFailure(
                f"{d.item}: {d.status.upper()}: " + "; ".join(r["text"] for r in d.reasons if r["blocking"])
            )
        if d.status == "not-supported":
            pytest.skip("; ".join(r["text"] for r in d.reasons))
        if d.status == "warn":
            warnings.warn(GateWarning(f"{d.item}: " + "; ".join(r["text"] for r in d.reasons)), stacklevel=2)


class GateCaseItem(_GateItem):
    """One case of the gate."""


class GateServingItem(_GateItem):
    """A serving check (C13 / C14 / C15) of the gate."""

    kind = "serving"


class GateModelItem(_GateItem):
    """A model-level check (C7 / E1) of the gate."""

    kind = "model"


def _decided(gs: _GateState, kind: str) -> dict:
    """Where ``gs`` keeps the Decisions of items of ``kind`` (``case``, ``serving``, ``model``)."""
    return {"case": gs.decisions, "serving": gs.serving, "model": gs.model}[kind]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    gs = _state(config)
    if gs is None:
        return
    from conformance.suite.plan import SERVING_CHECKS
    from conformance.suite.run import MODEL_CHECKS

    items += [
        GateCaseItem.from_parent(session, name=f"gate/{r['case']}", gstate=gs, key=i)
        for i, r in enumerate(gs.session.rows)
    ]
    if gs.session.opts.model_checks:
        items += [GateModelItem.from_parent(session, name=f"gate/{c}", gstate=gs, key=c) for c, _, _ in MODEL_CHECKS]
    if gs.session.opts.serving_checks:  # the suite's order: C13-C15 after C7 / E1
        items += [GateServingItem.from_parent(session, name=f"gate/{c}", gstate=gs, key=c) for c in SERVING_CHECKS]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """xdist worker: the item's Decision rides on its call-phase report."""
    outcome = yield
    if call.when == "call" and isinstance(item, _GateItem) and hasattr(item.config, "workerinput"):
        from conformance.runtime.xdist_ship import attach

        attach(outcome.get_result(), _KEY, item.shipped())


def _merge(config, shipped) -> None:
    """xdist controller: one item's shipped ``(kind, Decision)``."""
    kind, d = shipped
    gs = _state(config)
    if gs is not None and d is not None:
        _decided(gs, kind)[d.item] = d


def pytest_sessionfinish(session, exitstatus) -> None:
    gs = _state(session.config)
    if gs is None:
        return
    gs.session.close()
    if hasattr(session.config, "workerinput"):  # an xdist worker: its items shipped
        return
    if not gs.decisions and not gs.model and not gs.serving:
        return
    from conformance.gate.report import to_json_dict, write_gate_reports
    from conformance.suite.report import triage_summary
    from conformance.suite.run import MODEL_CHECKS

    order = [cid for cid, _, _ in MODEL_CHECKS]
    model = [gs.model[c] for c in order if c in gs.model]
    stopped = exitstatus == pytest.ExitCode.INTERRUPTED
    serving = list(gs.serving.values())
    res = gs.session.result(list(gs.decisions.values()), model, interrupted=stopped, serving=serving)
    try:
        if not stopped:  # the kernels' children are closed: the searches fork from here
            gs.session.triage(res)
    except KeyboardInterrupt:  # stopped during the triage: the report goes without it
        res.candidate.pop("triage", None)
        raise
    finally:
        gs.written = write_gate_reports(to_json_dict(res), gs.out_dir)
        gs.written["summary"] = res.overall["summary"]
        gs.written["triage"] = triage_summary(res.candidate.get("triage") or {})


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    gs = _state(config)
    if gs is None or not gs.written:
        return
    terminalreporter.section("int8conf gate")
    terminalreporter.write_line(gs.written["summary"])
    for line in gs.written["triage"]:
        terminalreporter.write_line(f"  {line}")
    for k in ("md", "json", "junit"):
        terminalreporter.write_line(f"report: {gs.written[k]}")
