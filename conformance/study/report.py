"""The study's report files, written atomically: ``study.json`` (schema ``int8conf.study.pow2`` v1),
``study.md`` (the same numbers for people, each next to its limits) and the pictures (:mod:`.plots`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from conformance.study import plots
from reference.fileio import atomic_write_json, atomic_write_text, portable_paths

JSON_NAME = "study.json"
MD_NAME = "study.md"
FIGURES = {"layers": "layer_agreement.png", "flips": "flip_rate.png", "perplexity": "perplexity.png"}


def _pct(x: float, digits: int = 2) -> str:
    t = f"{100 * x:+.{digits}f} %"
    return "+" + t[1:] if t.startswith("-") and float(t[:-2]) == 0 else t  # no "-0.00 %"


def _ci_pct(iv: dict, digits: int = 2) -> str:
    return f"{_pct(iv['point'], digits)} [{_pct(iv['lo'], digits)}, {_pct(iv['hi'], digits)}]"


def _num(x, digits: int = 4) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def headline(r: dict) -> list[str]:
    """The headline lines of report ``r`` (also printed by the CLI)."""
    la, e2e, acc, fl = (r.get(k) or {} for k in ("layer_agreement", "e2e_agreement", "accuracy", "flips"))
    a, b = (k["name"] for k in r["kernels"])
    model = f"{r['model']['parameters'] / 1e6:.1f} M-parameter model" if r.get("model") else "this model"
    lines = [f"NOT RUN ({_why_missing(r, p)}): {p}" for p in r.get("missing_parts") or []]
    lines += [
        f"gate: committed checkpoint reproduced by rule {', '.join(r['gate']['which_rule']['reproduced_by'])}; "
        f"the two rules differ on {r['gate']['rule_disagreement']['fraction'] * 100:.2f} % of int8 weights"
    ]
    for mode, m in la.get("modes", {}).items():
        lines.append(
            f"layers {mode}: {m['layers_identical']}/{m['layers']} bit-identical {a} vs {b}, "
            f"{m['differing']} of {m['elements']} elements differ ({m['per_million']:.2f} per million; "
            f"declared contracts predict {m['predicted_differing']}), max {m['max_ulp']} ulp "
            f"[{la['capture']['tokens_per_layer']} captured rows per layer]"
        )
    for mode, c in e2e.get("a_vs_b", {}).items():
        lines.append(
            f"e2e {mode}: {c['identical_sequences']}/{c['prompts']} greedy sequences byte-identical "
            f"{a} vs {b} [{e2e['prompts']} prompts x {e2e['new_tokens']} new tokens]"
        )
    scope = f" [{acc['windows']} windows x {acc['window_len']} tokens, {model}]" if acc else ""
    for arm, rec in acc.get("arms", {}).items():
        rc = rec.get("rel_change_vs_own")
        vs = f", vs own {_ci_pct(rc)} ({int(acc['bootstrap']['level'] * 100)} % CI)" if rc is not None else ""
        lines.append(f"perplexity {arm}: {rec['perplexity']['point']:.4f}{vs}" + scope)
    for mode, m in fl.get("modes", {}).items():
        lines.append(
            f"flips {mode}: {m['flips']}/{m['positions']} teacher-forced positions "
            f"({100 * m['flip_rate']:.3f} %), {m['flips_above_4_spacings']} above 4 spacings "
            f"[{fl['windows']} windows x {fl['window_len']} tokens]"
        )
    return lines


def _md_gate(g: dict) -> list[str]:
    wr, rd, lib = g["which_rule"], g["rule_disagreement"], g["library"]
    L = ["## 1. Reconstruction gate", ""]
    L += ["| rule | how it divides | reproduces the committed checkpoint |", "|---|---|---|"]
    for rule, res in wr["results"].items():
        verdict = (
            f"yes, {res['tensors']} tensors byte for byte"
            if res["passed"]
            else f"no: tensor `{res['tensor']}` element {res['index']}: committed {res['committed']}, "
            f"rebuilt {res['rebuilt']}"
        )
        L.append(f"| `{rule}` | {g['rules'][rule]} | {verdict} |")
    L += ["", f"Checkpoint: `{wr['committed_dir']}`. Requantized arms use rule `{wr['rule']}`.", ""]
    f = rd.get("first")
    first = (
        f"; first: `{f['layer']}` {f['index']}, w = {f['w_bits']}, scale = {f['scale_bits']}: "
        f"cpu {f['cpu']}, cuda-triton {f['cuda_triton']}."
        if f
        else "."
    )
    L.append(
        f"On this model's weights the two rules give different int8 values for {rd['differing']} of "
        f"{rd['elements']} elements ({100 * rd['fraction']:.2f} %, always by at most {rd['max_abs_diff']})" + first
    )
    pi = g["pow2_rule_independence"]
    L.append(
        "Power-of-two arms are rule-independent (division by 2^k is exact): "
        + ", ".join(
            f"pow2-{k}: elements differing from the exact division over {v['layers']} layers, "
            f"cpu rule {v['differing_cpu']}, cuda-triton rule {v['differing_cuda_triton']}"
            for k, v in pi.items()
        )
        + "."
    )
    if lib.get("installed"):
        L.append(
            f"compressed-tensors {lib['version']} itself ({lib['path']}): int8 weights identical to rule "
            f"`cpu` on {lib['identical_q']}/{lib['layers']} layers, scales on {lib['identical_scale']}/"
            f"{lib['layers']}."
        )
    else:
        L.append(
            f"compressed-tensors not importable here ({lib.get('reason')}): library cross-check skipped "
            f"(the test suite runs it on the CPU)."
        )
    return L + [""]


def _md_layers(la: dict, a: str, b: str) -> list[str]:
    c = la["capture"]
    L = [
        "## 2. Layer-level agreement",
        "",
        f"Captured: {c['tokens_per_layer']} held-out token rows per layer ({c['windows']} windows x "
        f"{c['window_len']} tokens, 64 positions each), {c['layers']} layers. Figure: "
        f"![layer agreement]({FIGURES['layers']})",
        "",
        f"| scale mode | layers bit-identical | elements differing {a} vs {b} | per million | predicted by the "
        f"declared contracts | {a} / {b} off own contract | max ulp | histogram |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, m in la["modes"].items():
        hist = ", ".join(f"{k}: {v}" for k, v in m["ulp_histogram"].items() if v)
        L.append(
            f"| {mode} | {m['layers_identical']}/{m['layers']} | {m['differing']} of {m['elements']} | "
            f"{m['per_million']:.2f} | {m['predicted_differing']} | {m['a_vs_declared']} / {m['b_vs_declared']} | "
            f"{m['max_ulp']} | {hist} |"
        )
    L.append("")
    for mode, m in la["modes"].items():
        if mode == "own":
            continue
        if m.get("differing_layers"):
            for d in m["differing_layers"]:
                L.append(f"- {mode}: `{d['layer']}` differs in {d['differing']} elements -- {d['explanation']}")
        else:
            L.append(
                f"- {mode}: every layer bit-identical; every precondition (power-of-two scales, bias point, "
                f"int32 headroom, float32 normal range) held in every layer."
            )
    return L + [""]


def _md_e2e(e: dict, a: str, b: str) -> list[str]:
    L = [
        "## 3. End-to-end greedy agreement",
        "",
        f"{e['prompts']} of the 8 fixed prompts (lengths {e['prompt_lengths']} tokens) x {e['new_tokens']} new "
        f"tokens, greedy, KV cache, no early stop." + (f" Batching: {e['batching']}." if e.get("batching") else ""),
        "",
        "| comparison | byte-identical sequences | also identical top-1 / margin every step | first divergence "
        "step (margin there, bf16 spacings) |",
        "|---|---|---|---|",
    ]

    def row(label, c):
        divs = [
            f"p{i}: step {p['first_divergence']} ({_num(p.get('margin_x'), 3)}, "
            f"{_num(p.get('margin_x_spacings'), 1)} sp)"
            for i, p in enumerate(c["per_prompt"])
            if p["first_divergence"] is not None
        ]
        L.append(
            f"| {label} | {c['identical_sequences']}/{c['prompts']} | {c['identical_logits']}/{c['prompts']} | "
            f"{'; '.join(divs) if divs else '-'} |"
        )

    for mode, c in e["a_vs_b"].items():
        row(f"{a} vs {b}, {mode}", c)
    for k, c in e["fresh_process"].items():
        row(f"{k} vs {k} in a fresh process, own", c)
    for k, c in e["prefill_vs_decode"].items():
        row(f"{k}: token-by-token decode vs one prefill, own", c)
    return L + ["", "Margins are those of the first-named run at the divergence step.", ""]


def _md_accuracy(acc: dict) -> list[str]:
    bs = acc["bootstrap"]
    lvl = int(round(bs["level"] * 100))
    L = [
        "## 4. Accuracy cost",
        "",
        f"Held-out perplexity, {acc['windows']} windows x {acc['window_len']} tokens ({acc['predicted_tokens']} "
        f"predicted tokens), W8A8 arms through kernel `{acc['kernel']}`. Intervals: {bs['method']}, "
        f"{bs['n_resamples']} resamples, seed {bs['seed']}, {lvl} %. Figure: ![perplexity]({FIGURES['perplexity']})",
        "",
        f"Scope: {acc.get('scope') or 'this model on these windows'}; the intervals cover window-to-window "
        f"variation of this corpus only, not other models, corpora or context lengths.",
        "",
        f"| arm | perplexity [{lvl} % CI] | change vs W8A8 own [{lvl} % CI] |",
        "|---|---|---|",
    ]
    for arm, rec in acc["arms"].items():
        p = rec["perplexity"]
        rc = _ci_pct(rec["rel_change_vs_own"], 3) if "rel_change_vs_own" in rec else "(baseline)"
        L.append(f"| {arm} | {p['point']:.4f} [{p['lo']:.4f}, {p['hi']:.4f}] | {rc} |")
    d = acc.get("decomposition")
    if d:

        def iv(x):
            return f"{x['point']:+.5f} [{x['lo']:+.5f}, {x['hi']:+.5f}]"

        L += [
            "",
            f"Decomposition of the wrong arm's damage ({d['unit']}; the wrong arm and pow2-nearest carry "
            f"identical scales: {acc['same_scales_wrong_vs_pow2_nearest']}):",
            "",
            "| term | log ratio [CI] | share |",
            "|---|---|---|",
            f"| total: wrong vs own | {iv(d['total_wrong_vs_own'])} | 100 % |",
            f"| weight-scale mismatch: wrong vs pow2-nearest | {iv(d['weight_scale_mismatch'])} | "
            f"{100 * d['mismatch_share']:.1f} % |",
            f"| power-of-two constraint: pow2-nearest vs own | {iv(d['pow2_constraint'])} | "
            f"{100 * d['constraint_share']:.1f} % |",
        ]
    return L + [""]


def _md_flips(fl: dict, a: str, b: str) -> list[str]:
    L = [
        "## 5. Teacher-forced flips",
        "",
        f"{fl['windows']} windows x {fl['window_len']} tokens; a flip = {a} and {b} pick different argmax "
        f"tokens; deciles of {a}'s top-2 margin. Figure: ![flip rate]({FIGURES['flips']})",
        "",
    ]
    modes = list(fl["modes"])
    L.append("| decile | margin range (logits) | " + " | ".join(f"{m}: flips / positions" for m in modes) + " |")
    L.append("|---" * (2 + len(modes)) + "|")
    first = fl["modes"][modes[0]]["deciles"]
    for i, d in enumerate(first):
        cells = [
            f"{dd['flips']} / {dd['positions']} ({100 * dd['rate']:.2f} %)"
            for dd in (fl["modes"][m]["deciles"][i] for m in modes)
        ]
        L.append(f"| {d['decile']} | [{d['margin_min']:.4g}, {d['margin_max']:.4g}] | " + " | ".join(cells) + " |")
    L.append("")
    for m in modes:
        r = fl["modes"][m]
        L.append(
            f"- {m}: {r['flips']} flips in {r['positions']} positions ({100 * r['flip_rate']:.3f} %), "
            f"{r['flips_above_4_spacings']} at margins above 4 bf16 spacings (largest flip margin "
            f"{r['max_flip_margin_spacings']:.1f} spacings)."
        )
    return L + [""]


def to_markdown(r: dict) -> str:
    """The Markdown report of a study report dict."""
    a, b = (k["name"] for k in r["kernels"])
    dev = r["settings"]["device"]
    ks = "; ".join(
        f"**{k['name']}** (declared `{k['contract']}`, path {k.get('path')}, device {dev})" for k in r["kernels"]
    )
    L = ["# The power-of-two study", "", f"Kernels: {ks}.", "", "## Limits (read these next to every number)", ""]
    L += [f"- {k.replace('_', ' ')}: {v}" for k, v in r["limits"].items()]
    L += [
        "- environment: " + ", ".join(f"{k} {v}" for k, v in r["environment"].items()),
        "- run time per part (s): " + ", ".join(f"{k} {v}" for k, v in r["seconds"].items()),
        "",
        "## Headline",
        "",
    ]
    L += [f"- {h}" for h in headline(r)] + [""] + _md_gate(r["gate"])
    for key, title, fn in (
        ("layer_agreement", "## 2. Layer-level agreement", lambda x: _md_layers(x, a, b)),
        ("e2e_agreement", "## 3. End-to-end greedy agreement", lambda x: _md_e2e(x, a, b)),
        ("accuracy", "## 4. Accuracy cost", _md_accuracy),
        ("flips", "## 5. Teacher-forced flips", lambda x: _md_flips(x, a, b)),
    ):
        why = (
            f"Not run in this report ({_why_missing(r, key)}; rerun the command without "
            f"--report-only and with the same settings to compute it: finished parts are reused)."
        )
        L += fn(r[key]) if r.get(key) else [title, "", why, ""]
    L += ["Reproduce: `int8conf study pow2 " + " ".join(_cli_args(r)) + "`", ""]
    return "\n".join(L)


def _why_missing(r: dict, part: str) -> str:
    return (r.get("missing_reasons") or {}).get(part, "time budget reached")


def _cli_args(r: dict) -> list[str]:
    """The options that reproduce report ``r``: every setting, the model as given, the captured rows used."""
    s = r["settings"]

    def shell(path: str) -> str:  # $TMPDIR (how reports write /tmp paths) runs where it is unset too
        return "${TMPDIR:-/tmp}" + path[len("$TMPDIR") :] if path.startswith("$TMPDIR") else path

    out = [f"--model {shell(s['model_dir'])}", f"--kernels {','.join(s['kernels'])}", f"--device {s['device']}"]
    rows = ((r.get("layer_agreement") or {}).get("capture") or {}).get("tokens_per_layer") or s["tokens"]
    out.append(f"--tokens {rows}")
    for k in ("windows", "window_len", "flip_windows", "prompts", "new_tokens", "resamples", "seed", "level"):
        out.append(f"--{k.replace('_', '-')} {s[k]}")
    out.append(f"--fresh-process {s['fresh_process']}")
    if s.get("committed_dir"):
        out.append(f"--committed {shell(s['committed_dir'])}")
    return out


def write_report(r: dict, out_dir) -> dict:
    """Write ``study.json``, ``study.md`` and the PNGs of the finished parts into ``out_dir``; returns
    ``{"json", "markdown", "figures": {key: file name}}`` (paths as str)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # render what study.json holds (key-sorted), so the report can be re-rendered from the JSON byte for byte
    # (paths portable: no absolute path of this machine in a committed report)
    r = portable_paths(json.loads(json.dumps(r, sort_keys=True)))
    a, b = (k["name"] for k in r["kernels"])
    figs = {}
    if r.get("layer_agreement"):
        figs["layers"] = plots.plot_layer_agreement(
            r["layer_agreement"]["layers"],
            out / FIGURES["layers"],
            f"{a} vs {b}: elements differing per layer ({r['layer_agreement']['capture']['tokens_per_layer']} "
            f"tokens/layer)",
        )
    if r.get("flips"):
        figs["flips"] = plots.plot_flip_rate(
            r["flips"]["modes"],
            out / FIGURES["flips"],
            f"teacher-forced flips {a} vs {b} ({r['flips']['windows']} windows)",
        )
    if r.get("accuracy"):
        figs["perplexity"] = plots.plot_perplexity(
            r["accuracy"],
            out / FIGURES["perplexity"],
            f"held-out perplexity ({r['accuracy']['windows']} windows x {r['accuracy']['window_len']} tokens)",
        )
    r["figures"] = figs
    atomic_write_json(out / JSON_NAME, r, allow_nan=True)
    atomic_write_text(out / MD_NAME, to_markdown(r))
    return {"json": str(out / JSON_NAME), "markdown": str(out / MD_NAME), "figures": figs}
