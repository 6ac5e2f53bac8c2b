"""Candidate vs incumbent, per case, per serving check and per model-level check, decided under a policy.

:func:`output_delta` classes the candidate's output against the incumbent's in spacings:
``identical``, ``within_one_spacing``, ``worse`` (more than one spacing or NaN-ness) or ``unknown``
(a baseline output digest that cannot be reproduced). :func:`decide_case` turns that and the check
verdict changes into one status of ``conformance.gate.status.STATUSES`` with its reasons; :func:`decide_serving`
decides a serving check (C13-C15) by :data:`SERVING_RULE`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

from conformance.checks.result import CHECK_NAMES, PRECONDITION_CHECKS, Verdict
from conformance.gate.policy import CONTRACT_DIFFERENCE, REQUIRE_RULES, Policy
from conformance.gate.status import CRASH, FAIL, NOT_SUPPORTED, PASS, TIMEOUT, WARN
from reference.bits import spacing_distance, ulp_histogram

IDENTICAL, WITHIN_ONE, WORSE, UNKNOWN = "identical", "within_one_spacing", "worse", "unknown"
#: Side statuses: the kernel ran (possibly failing checks), declined, died, hung,
#: or the harness itself failed on the case.
RAN, HARNESS = "ran", "harness-error"
#: Checks whose regressions are judged by the output rules (they are about the same bits).
OUTPUT_CHECKS = ("C5", "C8")


@dataclass
class Side:
    """One kernel's outcome on one case: ``status`` (``ran`` | ``not-supported`` | ``crash`` | ``timeout`` |
    ``harness-error``), ``checks`` ``{check id: {"verdict", "summary", "kernel_failure"}}``, the CPU ``output``
    and its ``tensor_digest`` (or None), the one-line ``error``, crash / timeout ``evidence``."""

    status: str
    checks: dict = field(default_factory=dict)
    output: object = None
    output_digest: Optional[str] = None
    error: Optional[str] = None
    evidence: dict = field(default_factory=dict)

    def failed(self, cid: str) -> bool:
        """True when check ``cid`` failed because of the kernel."""
        return bool((self.checks.get(cid) or {}).get("kernel_failure"))


def _kernel_failure(cid: str, verdict: str, evidence: dict) -> bool:
    pre = cid in PRECONDITION_CHECKS
    return verdict == Verdict.FAIL and not (pre and (evidence or {}).get("failure_kind") == "precondition")


def side_from_case_result(cr) -> Side:
    """Side of a ``conformance.suite.evaluate.CaseResult`` (output kept if it was)."""
    checks = {
        cid: {"verdict": r.verdict, "summary": r.summary, "kernel_failure": r.is_kernel_failure}
        for cid, r in cr.checks.items()
    }
    status = NOT_SUPPORTED if cr.not_run_reason is not None else RAN
    return Side(status, checks, cr.output, cr.output_digest, cr.error)


def side_from_report_case(d: dict) -> Side:
    """Side of one ``cases[]`` entry of a stored conformance report (no output
    tensor: only its digest)."""
    checks = {}
    for cid, c in (d.get("checks") or {}).items():
        v = c.get("verdict")
        failed = _kernel_failure(cid, v, c.get("evidence"))
        checks[cid] = {"verdict": v, "summary": c.get("summary", ""), "kernel_failure": failed}
    status = NOT_SUPPORTED if d.get("not_run_reason") else RAN
    return Side(status, checks, None, d.get("output_digest"), d.get("error"))


def output_delta(cand, inc) -> dict:
    """Bit distance of two out_dtype [M, N] outputs of one case: ``{"class", "max_ulp", "n_differ",
    "n_elements", "ulp_histogram"}``; a shape / dtype mismatch is ``worse`` with ``why``."""
    if tuple(cand.shape) != tuple(inc.shape) or cand.dtype != inc.dtype:
        why = f"output {tuple(cand.shape)} {cand.dtype} vs incumbent {tuple(inc.shape)} {inc.dtype}"
        return {"class": WORSE, "why": why}
    dist = spacing_distance(cand, inc)
    mx = int(dist.max()) if dist.numel() else 0
    cls = IDENTICAL if mx == 0 else WITHIN_ONE if mx <= 1 else WORSE
    out = {"class": cls, "max_ulp": mx, "n_differ": int((dist > 0).sum()), "n_elements": int(dist.numel())}
    return {**out, "ulp_histogram": ulp_histogram(dist)}


def check_changes(cand: Side, inc: Optional[Side]) -> list[dict]:
    """Per-check verdict changes from the incumbent to the candidate: ``[{"check", "incumbent", "candidate",
    "change"}]`` with ``change`` ``regression`` (the candidate fails because of the kernel where the incumbent
    did not), ``improvement`` (the reverse) or ``changed`` (e.g. pass -> n/a); unchanged checks are left out."""
    out = []
    if inc is None:
        return out
    for cid in sorted(set(cand.checks) | set(inc.checks)):
        c, i = cand.checks.get(cid) or {}, inc.checks.get(cid) or {}
        cv, iv = c.get("verdict"), i.get("verdict")
        if cv == iv and bool(c.get("kernel_failure")) == bool(i.get("kernel_failure")):
            continue
        change = (
            "regression"
            if c.get("kernel_failure") and not i.get("kernel_failure")
            else "improvement"
            if i.get("kernel_failure") and not c.get("kernel_failure")
            else "changed"
        )
        out.append({"check": cid, "incumbent": iv, "candidate": cv, "change": change})
    return out


def scale_family(scale_mode: str) -> str:
    """``pow2`` for the power-of-two weight scale mode, ``real`` otherwise."""
    return "pow2" if scale_mode == "pow2" else "real"


class _Reasons:
    """Collects reasons, applying the policy's expectations to blocking ones."""

    def __init__(self, policy: Policy, case: Optional[str], layer: Optional[str]):
        self.policy, self.case, self.layer = policy, case, layer
        self.items: list[dict] = []
        self.used: set[int] = set()

    def add(self, check: str, text: str, blocks: bool) -> None:
        exp = self.policy.expectation_for(check, self.case, self.layer) if blocks else None
        if exp is not None:
            self.used.add(exp.index)
        expected = exp.label() if exp is not None else None
        self.items.append({"check": check, "text": text, "blocking": blocks and exp is None, "expected": expected})

    @property
    def blocking(self) -> bool:
        return any(r["blocking"] for r in self.items)


@dataclass
class Decision:
    """The gate's verdict on one case (or model-level check ``C7`` / ``E1``): ``status`` of ``STATUSES``,
    ``blocking`` (the swap), ``reasons`` ``[{"check", "text", "blocking", "expected"}]``, ``delta``
    (:func:`output_delta` or None), ``changes`` (:func:`check_changes`), ``expectations_used`` (indices),
    the case's coordinates, ``evidence`` (crash / timeout / model check; ``repro`` dir), ``candidate_failed``
    (the checks the candidate failed on the case as the kernel's failure, the gate's triage starts from them) and
    ``manifest`` (the candidate's run manifest on this case, or None)."""

    item: str
    status: str
    blocking: bool
    reasons: list
    delta: Optional[dict] = None
    changes: list = field(default_factory=list)
    expectations_used: list = field(default_factory=list)
    layer: Optional[str] = None
    family: Optional[str] = None
    scale_mode: Optional[str] = None
    source: Optional[str] = None
    evidence: dict = field(default_factory=dict)
    candidate_failed: list = field(default_factory=list)
    manifest: Optional[dict] = field(default=None, repr=False)

    def to_dict(self) -> dict:
        """JSON-able dict (the run ``manifest`` feeds the report's environment only)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "manifest"}


def _describe_delta(delta: dict) -> str:
    if "why" in delta:
        return delta["why"]
    return (
        f"{delta['n_differ']}/{delta['n_elements']} elements differ from the incumbent's "
        f"output (max {delta['max_ulp']} spacing{'s' if delta['max_ulp'] != 1 else ''})"
    )


#: What a difference is when both kernels pass C8 (policy module docstring, rule 1).
LEGAL = "a difference the two declared contracts allow (C8 passes for both kernels)"


def _own_contract(side: Side) -> bool:
    """The kernel's output is the reference of its own declared contract (C8 passes)."""
    return (side.checks.get("C8") or {}).get("verdict") == Verdict.PASS


def _legal_note(legal: bool) -> str:
    return f"; {LEGAL}, but the policy has no {CONTRACT_DIFFERENCE} rule" if legal else ""


def decide_case(
    case: str,
    cand: Side,
    inc: Optional[Side],
    delta: Optional[dict],
    policy: Policy,
    scale_mode: str = "synthetic",
    layer: Optional[str] = None,
    source: Optional[str] = None,
) -> Decision:
    """One case's status under ``policy`` (rules: ``conformance.gate.policy`` module docstring). ``inc``: None
    if unknown; ``delta``: :func:`output_delta`, None when either side has no output; ``layer``: the capture's
    layer, for expectations; ``scale_mode`` ``pow2`` -> the pow2 family."""
    fam = scale_family(scale_mode)
    rs = _Reasons(policy, case, layer)
    changes = check_changes(cand, inc) if cand.status == RAN and inc is not None and inc.status == RAN else []
    inc_ran = inc is not None and inc.status == RAN
    if cand.status in (CRASH, TIMEOUT):
        rs.add(cand.status, cand.error or cand.status, True)
        status = cand.status
    elif cand.status == NOT_SUPPORTED:
        other = "; the incumbent ran this case" if inc_ran else "; the incumbent did not run it either"
        rs.add(NOT_SUPPORTED, (cand.error or "not runnable here") + other, policy.not_supported == "block" and inc_ran)
        status = NOT_SUPPORTED
    elif cand.status == HARNESS:
        rs.add("harness", f"the gate could not evaluate this case: {cand.error}", True)
        status = FAIL
    else:
        identical = delta is not None and delta.get("class") == IDENTICAL
        for cid in sorted(cid for cid in cand.checks if cand.failed(cid)):
            name = CHECK_NAMES.get(cid, cid)
            summ = (cand.checks[cid].get("summary") or "")[:200]
            if inc_ran and inc.failed(cid):
                rs.add(cid, f"{cid} {name} fails, as it does for the incumbent: {summ}", False)
            elif cid in OUTPUT_CHECKS and delta is not None and not identical:
                judged = "judged by the output rule below"
                rs.add(cid, f"{cid} {name} fails where the incumbent passes ({judged}): {summ}", False)
            else:
                was = inc.checks.get(cid, {}).get("verdict") if inc_ran else "unknown"
                rs.add(cid, f"{cid} {name}: incumbent {was} -> candidate fail: {summ}", True)
        if delta is not None:
            cls = delta.get("class")
            text = _describe_delta(delta)
            legal = cls in (WITHIN_ONE, WORSE) and inc_ran and _own_contract(cand) and _own_contract(inc)
            note = _legal_note(legal)
            if legal and policy.allows_contract_difference:
                rs.add("output", f"{text}; {LEGAL}: allowed by the policy ({CONTRACT_DIFFERENCE})", False)
            elif cls == WITHIN_ONE:
                if fam in policy.required_families:
                    rule = next(r for r in policy.require if fam in REQUIRE_RULES[r])
                    rs.add("output", f"{text}; policy requires bit identity here ({rule})" + note, True)
                elif fam in policy.allowed_families:
                    rs.add("output", f"{text}; allowed by the policy (within one spacing, {fam} scales)" + note, False)
                else:
                    rs.add("output", f"{text}; no allow rule of the policy covers {fam}-scale cases" + note, True)
            elif cls == WORSE:
                rs.add("output", f"{text}: more than one spacing" + note, True)
            elif cls == UNKNOWN:
                rs.add("output", text, True)
        elif not inc_ran:
            it = inc.status if inc is not None else "is unknown"
            rs.add("output", f"no incumbent output on this case (it {it}): judged on the candidate's own checks", False)
        status = FAIL if rs.blocking else WARN if rs.items else PASS
    used, ev = sorted(rs.used), dict(cand.evidence)
    own = sorted(cid for cid in cand.checks if cand.failed(cid)) if cand.status == RAN else []
    coords = (layer, fam, scale_mode, source)
    return Decision(case, status, rs.blocking, rs.items, delta, changes, used, *coords, ev, own)


def _hash(res: Optional[dict]) -> Optional[list]:
    return ((res or {}).get("evidence") or {}).get("kernel_logits_hash")


def decide_model(
    check_id: str,
    cand: Optional[dict],
    inc: Optional[dict],
    policy: Policy,
    cand_status: str = RAN,
    error: Optional[str] = None,
    evidence: Optional[dict] = None,
) -> Decision:
    """The status of a model-level check (C7 token_flip, E1 engine_hash). ``cand`` / ``inc``: the check's
    result dicts (``CheckResult.to_dict()`` or a report's ``checks[]`` entry; None when absent);
    ``cand_status``: ``ran`` | ``crash`` | ``timeout`` | ``harness-error``; ``error`` / ``evidence``: crash /
    timeout details. C7 fails above the policy's flip limit and warns on flips below it; E1 fails when the
    candidate's engine hash differs from the incumbent's (unless the policy allows it) or newly differs from
    the exact reference."""
    rs = _Reasons(policy, None, None)
    name = CHECK_NAMES.get(check_id, check_id)
    status = PASS
    if cand_status in (CRASH, TIMEOUT):
        rs.add(cand_status, error or cand_status, True)
        status = cand_status
    elif cand_status == HARNESS:
        rs.add("harness", f"the gate could not run {check_id}: {error}", True)
        status = FAIL
    elif cand is None or cand.get("verdict") == Verdict.NOT_APPLICABLE:
        rs.add(check_id, f"{check_id} {name} not run: " + ((cand or {}).get("summary") or "disabled"), False)
        status = NOT_SUPPORTED
    else:
        ev = cand.get("evidence") or {}
        if check_id == "C7":
            above = ev.get("flips_above_threshold")
            lim = policy.max_token_flips_above_threshold
            if cand.get("verdict") == Verdict.FAIL and above is None:
                rs.add("C7", f"C7 token_flip failed: {cand.get('summary')}", True)
            elif above is not None and lim is not None and int(above) > lim:
                thr = ev.get("threshold")
                rs.add("C7", f"{above} token flips above the margin threshold ({thr}), policy allows {lim}", True)
            elif ev.get("flips"):
                rs.add("C7", f"{ev.get('flips')} token flips, {above} above the threshold (policy allows {lim})", False)
        else:
            ch, ih = _hash(cand), _hash(inc)
            if cand.get("verdict") == Verdict.FAIL and (inc or {}).get("verdict") != Verdict.FAIL:
                rs.add("E1", f"E1 engine_hash fails where the incumbent passes: {cand.get('summary')}", True)
            if ch is not None and ih is not None and ch != ih:
                moved = f"engine hash moved: {ch[0]} (candidate) vs {ih[0]} (incumbent)"
                rs.add("E1", moved, not policy.allow_engine_hash_change)
        status = FAIL if rs.blocking else WARN if rs.items else PASS
    ev = {"candidate": cand, "incumbent": inc, **(evidence or {})}
    return Decision(check_id, status, rs.blocking, rs.items, expectations_used=sorted(rs.used), evidence=ev)


#: How a serving check (C13 graph_replay, C14 compile, C15 streams_devices: kernel-level, no case) is decided
#: (:func:`decide_serving`; the gate's README): candidate fails (crash / timeout during the check included) ->
#: ``fail``, blocking, unless the incumbent fails it too -> ``warn`` ("both fail"), not blocking; candidate ``n/a``
#: (no CUDA, ...) -> ``not-supported``, never blocking (whatever the policy's ``not_supported``); candidate passes
#: -> ``pass``. An incumbent that is ``n/a``, passes, or is unknown (an older baseline) does not excuse a failure.
SERVING_RULE = "a candidate failing a serving check blocks unless the incumbent fails it too (both fail); n/a never"
#: :func:`decide_serving`'s ``evidence["outcome"]`` values
BOTH_FAIL = "both fail"


def _serving_failed(res: Optional[dict]) -> bool:
    return (res or {}).get("verdict") == Verdict.FAIL


def decide_serving(
    check_id: str,
    cand: Optional[dict],
    inc: Optional[dict],
    cand_status: str = RAN,
    error: Optional[str] = None,
    evidence: Optional[dict] = None,
) -> Decision:
    """The status of serving check ``check_id`` (C13 / C14 / C15) by :data:`SERVING_RULE`. ``cand`` / ``inc``: the
    check's result dicts (``CheckResult.to_dict()`` or a report's ``checks[]`` entry; None when absent; an incumbent
    that crashed or hung during the check is given as a ``fail`` dict); ``cand_status``: ``ran`` | ``crash`` |
    ``timeout`` | ``harness-error`` (the gate could not run it: blocks, as a model-level check's); ``error`` /
    ``evidence``: crash / timeout details. ``evidence["outcome"]``: ``pass``, ``fail``, :data:`BOTH_FAIL`, ``n/a``
    or ``harness``."""
    name = CHECK_NAMES.get(check_id, check_id)
    reasons: list[dict] = []

    def why(text: str, blocks: bool) -> None:
        reasons.append({"check": check_id, "text": text, "blocking": blocks, "expected": None})

    inc_fails = _serving_failed(inc)
    inc_line = f"incumbent: {(inc or {}).get('summary') or ''}"[:200]
    if cand_status == HARNESS:
        why(f"the gate could not run {check_id}: {error}", True)
        status, outcome = FAIL, "harness"
    elif cand_status in (CRASH, TIMEOUT) or _serving_failed(cand):
        line = f"{cand_status}: {error or cand_status}" if cand_status in (CRASH, TIMEOUT) else None
        summ = (line or (cand or {}).get("summary") or "")[:200]
        if inc_fails:
            why(f"{check_id} {name} fails, as it does for the incumbent ({BOTH_FAIL}): {summ}; {inc_line}", False)
            status, outcome = WARN, BOTH_FAIL
        else:
            was = (inc or {}).get("verdict") or "unknown"
            why(f"{check_id} {name}: incumbent {was} -> candidate fail: {summ}", True)
            status, outcome = (cand_status if line else FAIL), "fail"
    elif cand is None or cand.get("verdict") == Verdict.NOT_APPLICABLE:
        why(f"{check_id} {name} n/a: " + ((cand or {}).get("summary") or "not run"), False)
        status, outcome = NOT_SUPPORTED, Verdict.NOT_APPLICABLE
    else:
        if inc_fails:
            why(f"{check_id} {name} passes where the incumbent fails ({inc_line})", False)
        status, outcome = PASS, "pass"
    ev = {"candidate": cand, "incumbent": inc, "outcome": outcome, **(evidence or {})}
    return Decision(check_id, status, any(r["blocking"] for r in reasons), reasons, evidence=ev)
