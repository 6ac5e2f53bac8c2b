"""Gate policies: YAML parsing with one-line errors naming file and field,
rule semantics, expectations matching, the shipped example policies."""

from pathlib import Path

import pytest

from conformance.gate.compare import Side, decide_case, decide_model
from conformance.gate.policy import PolicyError, load_policy, parse_policy

ROOT = Path(__file__).resolve().parents[3]


def _write(tmp_path, text):
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, field",
    [
        ("require: [bit_identicle]\n", "field 'require': unknown rule 'bit_identicle'"),
        ("allow: 3\n", "field 'allow'"),
        ("max_token_flips_above_threshold: -1\n", "field 'max_token_flips_above_threshold'"),
        ("not_supported: maybe\n", "field 'not_supported'"),
        ("colour: red\n", "unknown field 'colour'"),
        ("expectations:\n  - case: x\n    check: C8\n    reason: r\n", "field 'expectations[0]'.owner"),
        ("expectations:\n  - check: C8\n    reason: r\n    owner: o\n", "needs case or layer"),
        ("expectations:\n  - case: x\n    check: C9\n    reason: r\n    owner: o\n", "unknown check 'C9'"),
        ("version: 2\n", "field 'version'"),
        ("require: [bit_identical\n", "not valid YAML at line"),
    ],
)
def test_bad_policy_is_one_line_naming_file_and_field(tmp_path, text, field):
    p = _write(tmp_path, text)
    with pytest.raises(PolicyError) as e:
        load_policy(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and field in msg.replace('"', "'")


def test_missing_policy_file_is_one_line(tmp_path):
    with pytest.raises(PolicyError, match="cannot read policy"):
        load_policy(tmp_path / "nope.yaml")


def test_example_policies_load_with_the_documented_families():
    pol = {p.stem: load_policy(p) for p in (ROOT / "examples" / "policies").glob("*.yaml")}
    assert pol["bit-identity"].required_families == {"pow2", "real"}
    assert pol["one-spacing"].required_families == {"pow2"}
    assert pol["one-spacing"].allowed_families == {"real"}
    assert [p.allows_contract_difference for p in pol.values()].count(True) == 2
    assert pol["one-spacing"].allows_contract_difference
    assert pol["with-expectations"].allows_contract_difference
    assert pol["one-spacing-everywhere"].allowed_families == {"pow2", "real"}
    assert len(pol["with-expectations"].expectations) == 2


def _ran(**checks):
    return Side("ran", {c: {"verdict": v, "summary": "", "kernel_failure": v == "fail"} for c, v in checks.items()})


def test_require_wins_over_allow_and_one_spacing_warns_only_where_allowed():
    pol = parse_policy({"require": "bit_identical_pow2", "allow": "within_one_spacing"})
    one = {"class": "within_one_spacing", "max_ulp": 1, "n_differ": 3, "n_elements": 10}
    assert decide_case("p", _ran(C5="pass"), _ran(C5="pass"), one, pol, "pow2").status == "fail"
    d = decide_case("r", _ran(C8="fail"), _ran(C8="pass"), one, pol, "own")
    assert d.status == "warn" and not d.blocking
    worse = dict(one, **{"class": "worse", "max_ulp": 2})
    assert decide_case("r", _ran(), _ran(), worse, pol, "own").status == "fail"


def test_non_output_check_regression_blocks_even_with_identical_bits():
    pol = parse_policy({"allow": "within_one_spacing"})
    same = {"class": "identical", "max_ulp": 0, "n_differ": 0, "n_elements": 4}
    d = decide_case("c", _ran(C2="fail"), _ran(C2="pass"), same, pol)
    assert d.status == "fail" and [r["check"] for r in d.reasons if r["blocking"]] == ["C2"]
    assert d.changes == [{"check": "C2", "incumbent": "pass", "candidate": "fail", "change": "regression"}]


def test_expectation_turns_a_blocker_into_a_warning_by_layer_pattern():
    pol = parse_policy(
        {"expectations": [{"layer": "model.layers.*.mlp.down_proj", "check": "output", "reason": "r", "owner": "@a"}]}
    )
    one = {"class": "within_one_spacing", "max_ulp": 1, "n_differ": 1, "n_elements": 4}
    hit = decide_case(
        "model.layers.3.mlp.down_proj[own]", _ran(), _ran(), one, pol, "own", layer="model.layers.3.mlp.down_proj"
    )
    miss = decide_case(
        "model.layers.3.mlp.up_proj[own]", _ran(), _ran(), one, pol, "own", layer="model.layers.3.mlp.up_proj"
    )
    assert (hit.status, hit.expectations_used, miss.status) == ("warn", [0], "fail")
    assert "@a: r" in hit.reasons[0]["expected"]


def test_model_level_flips_and_engine_hash():
    pol = parse_policy({"max_token_flips_above_threshold": 1})
    c7 = lambda above: {
        "verdict": "pass",
        "evidence": {"flips": 5, "flips_above_threshold": above, "threshold": "4 spacings"},
    }
    assert decide_model("C7", c7(2), None, pol).status == "fail"
    assert decide_model("C7", c7(1), None, pol).status == "warn"
    e1 = lambda h: {"verdict": "pass", "evidence": {"kernel_logits_hash": [h]}}
    assert decide_model("E1", e1("aaa"), e1("aaa"), pol).status == "pass"
    assert decide_model("E1", e1("aaa"), e1("bbb"), pol).status == "fail"
    lenient = parse_policy({"allow_engine_hash_change": True})
    assert decide_model("E1", e1("aaa"), e1("bbb"), lenient).status == "warn"
    assert decide_model("C7", None, None, pol, "crash", "killed by SIGSEGV").status == "crash"


def test_ci_recipe_gates_on_cpu_and_gpu_uploads_reports_and_ci_run_checks_exit_codes():
    import yaml

    wf = yaml.safe_load((ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    jobs = wf["jobs"]
    assert set(jobs) == {"gate-cpu", "gate-gpu"} and "HAS_GPU_RUNNER" in jobs["gate-gpu"]["if"]
    for job in jobs.values():
        runs = " ".join(s.get("run", "") for s in job["steps"])
        assert "int8conf gate" in runs and "--policy" in runs and "pip install" in runs
        up = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
        assert up and up[0]["if"] == "always()"  # reports uploaded even when the gate blocks
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("python -m pytest -q") < ci.index("expect 0 exact")
    for want in ("expect 1 fault-bit", "expect 0 fault-one", "expect 0 legal-swap", "expect 2 stale-baseline"):
        assert want in ci


def test_contract_difference_needs_c8_to_pass_for_both_kernels():
    """Rule 1 of the policy docstring: with ``contract_difference`` a
    difference of any size warns only where both kernels pass C8; it goes
    before ``require``; without C8 on both sides the family rules decide."""
    pol = parse_policy({"require": "bit_identical", "allow": "contract_difference"})
    worse = {"class": "worse", "max_ulp": 15003, "n_differ": 3, "n_elements": 10}
    one = dict(worse, **{"class": "within_one_spacing", "max_ulp": 1})
    both = decide_case("s", _ran(C8="pass"), _ran(C8="pass"), worse, pol, "pow2")
    assert (both.status, both.blocking, both.reasons[0]["text"]) == (
        "warn",
        False,
        "3/10 elements differ from the incumbent's output (max 15003 spacings); a "
        "difference the two declared contracts allow (C8 passes for both kernels): allowed by "
        "the policy (contract_difference)",
    )
    assert decide_case("s", _ran(C8="pass"), _ran(C8="fail"), one, pol, "own").status == "fail"
    assert decide_case("s", _ran(C8="fail"), _ran(C8="pass"), one, pol, "own").status == "fail"
    assert decide_case("s", _ran(C8="n/a"), _ran(C8="pass"), one, pol, "own").status == "fail"
    strict = parse_policy({"require": "bit_identical"})
    d = decide_case("s", _ran(C8="pass"), _ran(C8="pass"), one, strict, "own")
    assert (d.status, d.reasons[0]["text"]) == (
        "fail",
        "3/10 elements differ from the incumbent's output (max 1 spacing); policy "
        "requires bit identity here (bit_identical); a difference the two declared contracts "
        "allow (C8 passes for both kernels), but the policy has no contract_difference rule",
    )


def test_a_shipped_policy_is_found_by_its_name_anywhere(tmp_path, monkeypatch):
    from conformance.gate.policy import SHIPPED_POLICIES, policy_path, shipped_policy_names

    monkeypatch.chdir(tmp_path)  # not a source checkout: no examples/policies here
    assert shipped_policy_names() == [
        "bit-identity",
        "bit-identity-quick-baseline",
        "one-spacing",
        "one-spacing-everywhere",
        "with-expectations",
    ]
    assert policy_path("bit-identity") == policy_path("bit-identity.yaml") == SHIPPED_POLICIES / "bit-identity.yaml"
    assert load_policy("one-spacing").name == load_policy(SHIPPED_POLICIES / "one-spacing.yaml").name
    (tmp_path / "bit-identity.yaml").write_text("name: mine\n")  # a file of the same name in the cwd wins
    assert load_policy("bit-identity.yaml").name == "mine"
    with pytest.raises(PolicyError, match=r"^--policy bit-identiy: no such file and no shipped policy .*one-spacing"):
        load_policy("bit-identiy")


def test_a_gate_on_a_reduced_suite_says_so_under_the_default_policy_it_describes_truly(tmp_path, capsys):
    """the gate's headline (console, gate.md) and gate.json's overall name what was skipped, as
    check's do (``suite.plan.reduced_suite``); P13c: the default policy's description says what blocks."""
    import json

    from conformance.cli import main

    out = tmp_path / "g"
    quick = ["--no-model", "--no-serving", "--no-tile-edges", "--no-captures", "-q"]
    rc = main(["gate", "--candidate", "int_mm", "--incumbent", "cpu", *quick, "--out", str(out)])
    assert rc == 0
    skipped = ["the tile-edge shapes and case families", "layer-capture replay", "the serving checks (C13, C14, C15)"]
    skipped += ["the model-level checks (C7, E1)"]
    head = "PASS on a reduced suite: " + ", ".join(skipped) + " skipped"
    # before: "PASS under policy 'default (bit identity)': 22 cases (22 pass)", no marker in gate.json
    assert (
        capsys.readouterr().out.splitlines()[0] == f"{head}; under policy 'default (bit identity)': 22 cases (22 pass)"
    )
    ov = json.loads((out / "gate.json").read_text())["overall"]
    assert (ov["headline"], ov["reduced_suite"]) == (head, skipped)
    md = (out / "gate.md").read_text().splitlines()
    assert md[0] == f"## int8conf gate: `int_mm` replacing `cpu` -- **{head}**"
    assert md[2].startswith("Policy `default (bit identity)` (<default>): require bit_identical; allow nothing;")
