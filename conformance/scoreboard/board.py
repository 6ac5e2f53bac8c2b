"""``int8conf scoreboard``: every available kernel (built-in and adapted) on the same cases, bit for bit.
Per (kernel, device) row: the verdict against its own declared epilogue, per-check verdicts, the maximum
spacing from each standard contract, and a kernel x kernel bit-interchangeability matrix; a reproducer per
failing (kernel, device, check), shrunk to the worst element when that still fails. Each row runs in its own
worker (forkserver) with a timeout per case and a longer one for the unscored warm-up. FP8 (e4m3) kernels get their
own rows (``fp8`` in the document) on FP8 cases (:func:`scoreboard_fp8_cases`), with the accumulator each declares
and the one C11 measures. Outputs: ``scoreboard.json`` (schema ``int8conf.scoreboard`` v1), ``.md``, ``.png``,
``repro/``, written atomically."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import torch
from rich.progress import Progress
from safetensors.torch import load_file, save

from conformance.cases import SYNTHETIC_KINDS, by_case_id, capture_cases, case_id, make_case
from conformance.cases.fp8 import fp8_capture_cases, fp8_family_cases
from conformance.checks.result import Verdict
from conformance.kernels import adapters
from conformance.kernels.registry import builtin_available, get_kernel
from conformance.kernels.spec import FP8, FP8_BUILTINS, INT8_BUILTINS, enter_conformance_run
from conformance.runtime.environment import environment as base_environment
from conformance.runtime.output_dirs import command_root, kernel_dirname
from conformance.runtime.pool import CRASHED, HARNESS_ERROR, OK, TIMED_OUT, IsolatedKernel, KernelRef
from conformance.runtime.repro import load_repro, save_repro
from conformance.scoreboard.render import STANDARD, render_markdown, render_png
from conformance.suite.evaluate import evaluate_case
from conformance.suite.workers import SUITE_REQUESTS
from reference.bits import NAN_DISTANCE, bits_of, spacing_distance
from reference.contract import NAMED
from reference.epilogue import apply_steps
from reference.errors import Int8confError
from reference.fileio import atomic_write_bytes, atomic_write_json, atomic_write_text, portable_paths
from reference.fp8 import exact_accumulator
from reference.model.checkpoint import SAFETENSORS_READ_ERRORS
from reference.operands import GemmOperands

SCHEMA, SCHEMA_VERSION = "int8conf.scoreboard", 1


def scoreboard_cases(quick: bool = False, captures: int = 2) -> list:
    """The shared case set (CPU GemmOperands): every synthetic kind (seed 0), two shape-path cases
    (M = 16 and 17, K = 2048, int8 extremes: libraries switch GEMM paths at M <= 16) and the first
    ``captures`` captured layers in both scale modes (own, pow2). ``quick``: four synthetic kinds."""
    if quick:
        return [make_case(k, 0) for k in ("ordinary", "bias", "tails", "fp16_out")]
    cases = [make_case(k, 0) for k in SYNTHETIC_KINDS]
    for m in (16, 17):
        cases.append(make_case("extreme", 0, m=m, k=2048, n=64, name=f"synthetic/extreme-m{m}-k2048"))
    if captures:
        try:
            cases += list(capture_cases(("own", "pow2"), max_layers=captures).cases)
        except Exception:  # noqa: BLE001 -- no captures here: synthetic only
            pass
    return cases


def scoreboard_fp8_cases(quick: bool = False, captures: int = 2) -> list:
    """The FP8 rows' case set (CPU GemmOperands, e4m3): every regime of the FP8 families (``conformance.cases.fp8``)
    with real scales and bf16 output, and the first ``captures`` captured layers quantized to e4m3 in both activation
    scale modes. ``quick``: three family cases."""
    cases = [c for c in fp8_family_cases() if c.name.endswith("-real-bf16")]
    if quick:
        return cases[:3]
    if captures:
        try:
            cases += list(fp8_capture_cases(max_layers=captures).cases)
        except Exception:  # noqa: BLE001 -- no captures (or parent model) here: families only
            pass
    return cases


def is_fp8_row(r) -> bool:
    """Whether row ``r`` (a :class:`Row`) is an FP8 (e4m3) kernel's."""
    return (r.spec or {}).get("operands") == FP8


@dataclass
class Row:
    """One (kernel, device) row: ``spec`` the manifest ({} when it did not load), ``cases`` case id ->
    ``CaseResult.to_dict()`` or ``{"verdict": "timeout", ...}``, ``outputs`` case id -> CPU output,
    ``error`` a load error line, ``accumulator`` (FP8 rows) ``{"declared", "measured", "verdict", "summary"}``
    (C11)."""

    kernel: str
    device: str
    spec: dict = field(default_factory=dict)
    cases: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    error: Optional[str] = None
    elapsed_s: float = 0.0
    warmup_s: float = 0.0
    accumulator: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.kernel}@{self.device}"


def _start_error(oc, timeout: float) -> Optional[str]:
    if oc.kind == OK:
        return None
    if oc.kind == TIMED_OUT:
        return f"worker did not start within {timeout:.0f} s"
    return oc.error.removeprefix("kernel could not be resolved in the child: ")


def run_row(
    kernel: str,
    device: str,
    cases: Sequence,
    case_timeout: float,
    warmup_timeout: float,
    progress=None,
    task=None,
    give_up_after: int = 2,
) -> Row:
    """Run one kernel on one device over ``cases`` in a worker process; timeouts are recorded per
    case, never raised. After ``give_up_after`` consecutive timeouts the rest of the row is recorded
    as not attempted (a shape-autotuning kernel would otherwise spend minutes per case)."""
    row = Row(kernel, device)
    try:
        row.spec = get_kernel(kernel).manifest()
    except Exception as e:  # noqa: BLE001 -- a user's kernel module or factory may raise anything: the row records it
        row.error = str(e).splitlines()[0]
        return row
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="int8conf-scoreboard-") as logs:
        iso = IsolatedKernel(
            KernelRef(kernel), cases, case_timeout, logs, device=device, method="forkserver", handlers=SUITE_REQUESTS
        )
        try:
            row.error = _start_error(iso.request("ping", timeout_s=warmup_timeout), warmup_timeout)
            if not row.error and _warm_up(row, iso, cases, warmup_timeout):
                _run_cases(row, iso, cases, case_timeout, warmup_timeout, progress, task, give_up_after)
                if is_fp8_row(row):
                    row.accumulator = _measured_accumulator(kernel, device, iso, warmup_timeout)
                row.elapsed_s = time.perf_counter() - t0
        finally:
            iso.close()
    return row


def _measured_accumulator(kernel: str, device: str, iso: IsolatedKernel, timeout: float) -> dict:
    """An FP8 row's accumulator: the one ``kernel`` declares on ``device`` and the one C11 measures there (in the
    row's worker, ``timeout`` seconds)."""
    declared = get_kernel(kernel).accumulator_on(device)
    out = {"declared": None if declared is None else declared.label(), "measured": None}
    oc = iso.request("accumulator", timeout_s=timeout)
    if oc.kind != OK:
        out.update(verdict=Verdict.FAIL, summary=oc.error or f"C11 did not finish ({oc.kind})")
        return out
    r = oc.value
    out.update(measured=(r.evidence or {}).get("measured"), verdict=r.verdict, summary=r.summary)
    return out


def _warm_up(row: Row, iso: IsolatedKernel, cases, timeout: float) -> bool:
    """The first case's shape, unscored (JIT / autotuning); False (every case recorded) when it fails."""
    tw = time.perf_counter()
    oc = iso.request("warm", 0, timeout)
    row.warmup_s = time.perf_counter() - tw
    if oc.kind == OK:
        return True
    timed_out = oc.kind == TIMED_OUT
    row.error = f"warm-up call exceeded {timeout:.0f} s" if timed_out else f"warm-up call: {oc.error}"
    for ops in cases:
        row.cases[case_id(ops)] = {
            "verdict": "timeout" if timed_out else Verdict.FAIL,
            "checks": {},
            "error": row.error,
        }
    return False


def _run_cases(row, iso, cases, case_timeout, warmup_timeout, progress, task, give_up_after) -> None:
    streak = 0
    for i, ops in enumerate(cases):
        cid = case_id(ops)
        if streak >= give_up_after:
            error = f"not attempted: {streak} consecutive timeouts"
            row.cases[cid] = {"verdict": "timeout", "checks": {}, "error": error}
        else:
            if not iso.running:
                why = _start_error(iso.request("ping", timeout_s=warmup_timeout), warmup_timeout)
                if why:
                    row.cases[cid] = {"verdict": "timeout", "checks": {}, "error": why}
                    continue
            oc = iso.request("case", i, case_timeout)
            streak = streak + 1 if oc.kind == TIMED_OUT else 0
            if oc.kind in (CRASHED, HARNESS_ERROR):  # the worker died inside the kernel: a kernel failure
                row.cases[cid] = {"verdict": Verdict.FAIL, "checks": {}, "error": oc.error}
            elif oc.kind == TIMED_OUT:
                error = f"case exceeded {case_timeout:.0f} s (worker restarted)"
                row.cases[cid] = {"verdict": "timeout", "checks": {}, "error": error}
            else:
                row.cases[cid] = oc.value.to_dict()
                if oc.value.output is not None:
                    row.outputs[cid] = oc.value.output
        if progress is not None:
            progress.advance(task)


def _max_spacing_from_standard(cases, rows) -> dict:
    refs = {}
    for ops in cases:  # int8: the exact int64 sum; e4m3: the exact sum rounded once to float32
        exact, kw = exact_accumulator(ops.a, ops.b), {"bias": ops.bias, "out_dtype": ops.out_dtype}
        refs[case_id(ops)] = {
            name: apply_steps(exact, ops.scale_a, ops.scale_b, NAMED[name], **kw) for name in STANDARD
        }
    out = {}
    for r in rows:
        d = {}
        for name in STANDARD:
            dists = [spacing_distance(o, refs[cid][name]) for cid, o in r.outputs.items()]
            worst = max((int(x.max()) if x.numel() else 0 for x in dists), default=None)
            d[name] = None if worst is None else (worst if worst < NAN_DISTANCE else "nan")
        out[r.key] = d
    return out


def _interchangeability(rows) -> dict:
    mat = {}
    for ra in rows:
        mat[ra.key] = {}
        for rb in rows:
            shared = sorted(set(ra.outputs) & set(rb.outputs))
            same = sum(torch.equal(bits_of(ra.outputs[c]), bits_of(rb.outputs[c])) for c in shared)
            mat[ra.key][rb.key] = {"identical": same, "shared": len(shared)}
    return mat


def _check_verdicts(row: Row) -> dict:
    agg = {}
    for res in row.cases.values():
        for cid, c in (res.get("checks") or {}).items():
            v = c.get("verdict")
            cur = agg.get(cid, Verdict.NOT_APPLICABLE)
            if v == Verdict.FAIL:
                pre = (c.get("evidence") or {}).get("failure_kind") == "precondition" or cid in ("C3", "C4")
                agg[cid] = Verdict.FAIL if not pre or cur == Verdict.FAIL else "pre"
            elif v == Verdict.PASS and cur == Verdict.NOT_APPLICABLE:
                agg[cid] = Verdict.PASS
            else:
                agg.setdefault(cid, cur)
    return dict(sorted(agg.items()))


def overall(row: Row) -> str:
    """``conformant`` / ``not conformant`` / ``timeout`` / ``not run`` for a row (an FP8 row whose C11 fails
    is not conformant)."""
    if row.error and not row.cases:
        return "not run"
    vs = [c.get("verdict") for c in row.cases.values()]
    if Verdict.FAIL in vs or row.accumulator.get("verdict") == Verdict.FAIL:
        return "not conformant"
    if "timeout" in vs:
        return "timeout"
    return "conformant" if Verdict.PASS in vs else "not run"


def _slice_ops(ops, i: int, j: int):
    """Output element ``(i, j)`` of a case as a 1 x K x 1 case."""

    def pick(s, idx, rows):
        if s.dim() == 0 or s.numel() == 1:
            return s.clone()
        return s.reshape(rows, -1)[idx : idx + 1].reshape((1,) + tuple(s.shape[1:])).clone()

    a, b, bias = (
        ops.a[i : i + 1].clone(),
        ops.b[j : j + 1].clone(),
        None if ops.bias is None else ops.bias[j : j + 1].clone(),
    )
    sa, sb = pick(ops.scale_a, i, ops.m), pick(ops.scale_b, j, ops.n)
    return GemmOperands(a, b, sa, sb, bias, ops.out_dtype, f"{ops.name}[{i},{j}]", ops.scale_mode, dict(ops.meta))


def _write_repros(out_dir: Path, rows, cases, root: Optional[Path] = None) -> dict:
    """A reproducer per failing (row, check): ``{row key: {check: {"file", "case", "minimal", "shape",
    "command", "summary"}}}``."""
    by_id = by_case_id(cases)
    links: dict = {}
    for r in rows:
        for cid_case, res in r.cases.items():
            for chk, c in (res.get("checks") or {}).items():
                if (
                    c.get("verdict") != Verdict.FAIL
                    or chk in ("C3", "C4")
                    or chk in links.get(r.key, {})
                    or cid_case not in by_id
                ):
                    continue
                ops = target = by_id[cid_case]
                minimal = False
                idx = ((c.get("evidence") or {}).get("worst") or {}).get("index")
                if isinstance(idx, (list, tuple)) and len(idx) == 2:
                    small = _slice_ops(ops, int(idx[0]), int(idx[1]))
                    try:
                        again = evaluate_case(get_kernel(r.kernel), small, device=r.device).checks.get(chk)
                        if again and again.verdict == Verdict.FAIL:
                            target, minimal = small, True
                    except Exception:  # noqa: BLE001 -- keep the full case
                        pass
                fname = f"{kernel_dirname(r.kernel)}-{r.device}-{chk}.safetensors"
                save_repro(out_dir / "repro" / fname, target, r.kernel, r.device, chk, c.get("summary", ""))
                links.setdefault(r.key, {})[chk] = {
                    "file": f"repro/{fname}",
                    "case": cid_case,
                    "minimal": minimal,
                    "shape": [target.m, target.k, target.n],
                    "command": f"int8conf scoreboard --repro {(root or out_dir) / 'repro' / fname}",
                    "summary": c.get("summary", ""),
                }
    return links


_RAW_KEYS = ("kernel", "device", "spec", "cases", "error", "elapsed_s", "warmup_s", "accumulator")


def save_raw(out_dir: Path, rows) -> None:
    """``raw.json`` (per-case results of every row) and ``outputs.safetensors`` (key
    ``<kernel>@<device>|<case>``), for ``--merge`` on another machine."""
    atomic_write_json(out_dir / "raw.json", [{k: getattr(r, k) for k in _RAW_KEYS} for r in rows])
    tensors = {f"{r.key}|{cid}": o.contiguous() for r in rows for cid, o in r.outputs.items()}
    atomic_write_bytes(out_dir / "outputs.safetensors", save(tensors))


def load_raw(src: Path) -> list:
    """Rows saved by :func:`save_raw` in ``src``. Raises Int8confError: missing or unreadable files."""
    src = Path(src)
    if not (src / "raw.json").is_file() or not (src / "outputs.safetensors").is_file():
        why = "needs raw.json and outputs.safetensors (written by 'int8conf scoreboard --save-outputs')"
        raise Int8confError(f"--merge {str(src)!r}: {why}")
    try:
        raw = json.loads((src / "raw.json").read_text())
        outs = load_file(str(src / "outputs.safetensors"))
    except SAFETENSORS_READ_ERRORS as e:  # raw.json's JSON errors are ValueErrors
        raise Int8confError(f"--merge {str(src)!r}: unreadable ({type(e).__name__})") from None
    rows = []
    for d in raw:
        r = Row(d["kernel"], d["device"], d.get("spec") or {}, d.get("cases") or {}, error=d.get("error"))
        r.elapsed_s, r.warmup_s = d.get("elapsed_s", 0.0), d.get("warmup_s", 0.0)
        r.accumulator = d.get("accumulator") or {}
        r.outputs = {k[len(r.key) + 1 :]: v for k, v in outs.items() if k.startswith(f"{r.key}|")}
        rows.append(r)
    return rows


def _row_doc(r: Row, links: dict) -> dict:
    return {
        "kernel": r.kernel,
        "device": r.device,
        "overall": overall(r),
        "declared": {"contract": (r.spec.get("contract") or {}), "steps": r.spec.get("steps")},
        "version": r.spec.get("version"),
        "error": r.error,
        "checks": _check_verdicts(r)
        if not r.accumulator
        else dict(_check_verdicts(r), C11=r.accumulator.get("verdict")),
        "cases_run": sum(1 for c in r.cases.values() if c.get("produced_output")),
        "cases_failed": sorted(k for k, c in r.cases.items() if c.get("verdict") == Verdict.FAIL),
        "cases_timeout": sorted(k for k, c in r.cases.items() if c.get("verdict") == "timeout"),
        "paths": sorted({c.get("path") for c in r.cases.values() if c.get("path")}),
        "elapsed_s": round(r.elapsed_s, 2),
        "warmup_s": round(r.warmup_s, 2),
        "repro": links.get(r.key, {}),
    }


def _case_docs(cases) -> list:
    return [
        dict(
            case=case_id(o),
            shape=[o.m, o.k, o.n],
            out_dtype=str(o.out_dtype),
            bias=o.bias is not None,
            scale_mode=o.scale_mode,
        )
        for o in cases
    ]


def build(rows, cases, links, env: dict, fp8_cases=()) -> dict:
    """The scoreboard document (JSON-able): the int8 rows on ``cases``; FP8 rows (if any) under ``fp8`` on
    ``fp8_cases``, each with its declared and measured accumulator."""
    int8 = [r for r in rows if not is_fp8_row(r)]
    doc = {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "environment": env,
        "cases": _case_docs(cases),
        "rows": [_row_doc(r, links) for r in int8],
        "max_spacing_from_standard": _max_spacing_from_standard(cases, int8),
        "interchangeability": _interchangeability(int8),
    }
    fp8 = [r for r in rows if is_fp8_row(r)]
    if fp8:
        doc["fp8"] = {
            "cases": _case_docs(fp8_cases),
            "rows": [dict(_row_doc(r, links), accumulator=r.accumulator) for r in fp8],
            "max_spacing_from_standard": _max_spacing_from_standard(fp8_cases, fp8),
            "interchangeability": _interchangeability(fp8),
        }
    return doc


def environment(devices) -> dict:
    """``conformance.runtime.environment.environment()`` plus ``devices`` (the device types run)."""
    return {**base_environment(), "devices": list(devices)}


def default_kernels() -> list[str]:
    """Every int8 kernel available here: built-ins, then adapters."""
    return [b for b in INT8_BUILTINS if builtin_available(b)[0]] + adapters.available_adapters()


def default_fp8_kernels() -> list[str]:
    """Every FP8 (e4m3) built-in available here."""
    return [b for b in FP8_BUILTINS if builtin_available(b)[0]]


def _merge(out: Path, merge: Sequence, own: set, root: Path) -> tuple[list, dict]:
    """Rows of the ``merge`` directories absent from this run (a later directory's row wins) and
    their reproducer links; their reproducer files are copied into ``out/repro``."""
    source = {}  # row key -> (row, merge dir)
    for src in merge:
        for r in load_raw(Path(src)):
            if r.key not in own:
                source[r.key] = (r, str(src))
    merged = [r for r, _ in source.values()]
    if (out / "repro").exists():  # stale files of rows that are no longer merged
        keep = {f"{r.kernel}-{r.device}-" for r in merged}
        for f in (out / "repro").glob("*.safetensors"):
            if not any(f.name.startswith(k) for k in keep):
                f.unlink()
    links: dict = {}
    for src in merge:
        p = Path(src) / "scoreboard.json"
        for r in json.loads(p.read_text())["rows"] if p.is_file() else []:
            key = f"{r['kernel']}@{r['device']}"
            if key not in source or source[key][1] != str(src):
                continue
            for chk, lk in (r.get("repro") or {}).items():
                (out / "repro").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(src) / lk["file"], out / lk["file"])
                lk["command"] = f"int8conf scoreboard --repro {root / lk['file']}"
                links.setdefault(key, {})[chk] = lk
    return merged, links


def run_scoreboard(
    out_dir=None,
    kernels: Optional[Sequence[str]] = None,
    devices: Optional[Sequence[str]] = None,
    cases: Optional[Sequence] = None,
    case_timeout: float = 60.0,
    warmup_timeout: float = 300.0,
    quiet: bool = False,
    jobs: int = 1,
    merge: Sequence = (),
    save_outputs: bool = False,
    report_root: Optional[str] = None,
    fp8_cases: Optional[Sequence] = None,
) -> dict:
    """Run the scoreboard, write its files and return the document.

    ``kernels``: None = :func:`default_kernels` and :func:`default_fp8_kernels`, ``[]`` = none (only
    merge); an e4m3 kernel runs ``fp8_cases`` (default :func:`scoreboard_fp8_cases`) and gets an FP8
    row; ``devices``: default cpu (+ cuda when present), a kernel gets a row per listed device it
    declares; ``cases``: default :func:`scoreboard_cases`; timeouts in seconds; ``jobs``: rows run concurrently. ``merge``:
    directories saved with ``save_outputs`` elsewhere (same cases): their rows and reproducers are
    added (this run's row wins, then a later directory's). ``save_outputs``: also write ``raw.json`` +
    ``outputs.safetensors``. ``report_root``: directory named in reproducer commands (default
    ``out_dir``). Raises KernelLoadError for an unknown kernel name.
    """
    out = Path(out_dir or command_root("scoreboard"))
    out.mkdir(parents=True, exist_ok=True)
    names = list(kernels) if kernels is not None else default_kernels() + default_fp8_kernels()
    devs = list(devices) if devices else (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    cases = list(cases) if cases is not None else scoreboard_cases()
    specs = {nm: get_kernel(nm) for nm in names}
    if fp8_cases is None:
        fp8_cases = scoreboard_fp8_cases() if any(s.is_fp8 for s in specs.values()) else []
    fp8_cases = list(fp8_cases)
    enter_conformance_run()  # the rows' children inherit it
    plan = [(nm, d, fp8_cases if specs[nm].is_fp8 else cases) for nm in names for d in devs if d in specs[nm].devices]
    with Progress(disable=quiet, transient=False) as prog:
        tasks = [prog.add_task(f"{nm}@{d}", total=len(cs)) for nm, d, cs in plan]
        with ThreadPoolExecutor(max_workers=max(1, int(jobs))) as ex:
            args = (case_timeout, warmup_timeout, prog)
            futures = [ex.submit(run_row, nm, d, cs, *args, t) for (nm, d, cs), t in zip(plan, tasks)]
            rows = [f.result() for f in futures]
    if save_outputs:
        save_raw(out, rows)
    root = Path(report_root) if report_root else out
    merged, merged_links = _merge(out, merge, {r.key for r in rows}, root)
    links = {**_write_repros(out, rows, cases + fp8_cases, root), **merged_links}
    rows = rows + merged
    env = environment(devs)
    if merged:
        env["merged_from"] = [str(m) for m in merge]
        env["devices"] = sorted({r.device for r in rows})
        env["merged_environments"] = [
            json.loads(p.read_text()).get("environment", {})
            for p in (Path(src) / "scoreboard.json" for src in merge)
            if p.is_file()
        ]
    doc = portable_paths(build(rows, cases, links, env, fp8_cases))  # no machine paths in the files
    atomic_write_json(out / "scoreboard.json", doc)
    atomic_write_text(out / "scoreboard.md", render_markdown(doc))
    render_png(doc, out / "scoreboard.png")
    return doc


def rerun_repro(path) -> tuple[bool, str]:
    """Re-run a scoreboard reproducer alone: ``(reproduced, line)``; reproduced when the recorded
    check fails again on the recorded kernel and device."""
    ops, meta = load_repro(path)
    res = evaluate_case(get_kernel(meta["kernel"]), ops, device=meta["device"])
    c = res.checks.get(meta["check"])
    line = f"{meta['kernel']}@{meta['device']} {meta['check']}: {c.verdict if c else 'missing'} -- {c.summary if c else ''}"
    return c is not None and c.verdict == Verdict.FAIL, line
