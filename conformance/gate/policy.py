"""Gate policies: a YAML file that says what blocks a kernel swap, plus expectations (known,
accepted deviations). Format, rule names and the decision order: README.md in this folder.
Errors are one line naming the file and the field (:class:`PolicyError`)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import yaml

from reference.errors import Int8confError

#: ``require`` rules -> the scale families they cover.
REQUIRE_RULES = {
    "bit_identical": ("pow2", "real"),
    "bit_identical_pow2": ("pow2",),
    "bit_identical_real_scales": ("real",),
}
#: ``allow`` rules -> the scale families they cover (``contract_difference``
#: covers no family: it applies where both kernels pass C8, module docstring).
CONTRACT_DIFFERENCE = "contract_difference"
ALLOW_RULES = {
    "within_one_spacing": ("pow2", "real"),
    "within_one_spacing_pow2": ("pow2",),
    "within_one_spacing_real_scales": ("real",),
    CONTRACT_DIFFERENCE: (),
}
#: What an expectation may name: a check id, ``output`` (the bit difference
#: to the incumbent) or a status the candidate ended in.
EXPECTATION_CHECKS = (
    "C1",
    "C2",
    "C3",
    "C4",
    "C5",
    "C6",
    "C7",
    "C8",
    "E1",
    "output",
    "crash",
    "timeout",
    "not-supported",
)
#: Model-level checks (an expectation for them needs no case / layer).
MODEL_LEVEL = ("C7", "E1")
_KEYS = tuple(
    "version name require allow max_token_flips_above_threshold allow_engine_hash_change not_supported"
    " fail_on_unused_expectations allow_reduced_baseline expectations description".split()
)
_EXP_KEYS = ("case", "layer", "check", "reason", "owner")
#: an expectation's ``case`` pattern written before the tile-edge shapes' rename (``sweep/M127*``) names them still
OLD_TILE_EDGES_PREFIX, TILE_EDGES_PREFIX = "sweep/", "tile_edges/"


class PolicyError(Int8confError):
    """A gate policy file is missing, not YAML, or has a bad field (one line)."""


@dataclass(frozen=True)
class Expectation:
    """One known, accepted deviation: ``check`` of :data:`EXPECTATION_CHECKS`, ``reason`` (shown in every
    report), ``owner`` (who removes it), fnmatch patterns ``case`` (e.g. ``tile_edges/M127*``) or ``layer`` (capture
    cases) or neither (model level), ``index`` in the file's list."""

    check: str
    reason: str
    owner: str
    case: Optional[str] = None
    layer: Optional[str] = None
    index: int = 0

    def matches(self, check: str, case: Optional[str] = None, layer: Optional[str] = None) -> bool:
        """True when this expectation covers ``check`` on ``case`` / ``layer``
        (a model-level expectation without case / layer covers the model check)."""
        if check != self.check:
            return False
        if self.case is None and self.layer is None:
            return case is None or check in MODEL_LEVEL
        if self.case is not None and case is not None and fnmatch.fnmatchcase(case, self.case):
            return True
        return self.layer is not None and layer is not None and fnmatch.fnmatchcase(layer, self.layer)

    def label(self) -> str:
        """``C8 on layer model.layers.*.mlp.down_proj (@alice: reason)``."""
        where = f"case {self.case}" if self.case else f"layer {self.layer}" if self.layer else "the model-level check"
        return f"{self.check} on {where} ({self.owner}: {self.reason})"

    def to_dict(self) -> dict:
        """JSON-able dict (None fields left out)."""
        d = {"check": self.check, "reason": self.reason, "owner": self.owner, "index": self.index}
        return {**d, **{k: v for k, v in (("case", self.case), ("layer", self.layer)) if v is not None}}


@dataclass(frozen=True)
class Policy:
    """A parsed gate policy (README.md in this folder for each field): ``source`` is the file it came from
    (or ``<dict>``), ``require`` / ``allow`` the rule names as given, ``max_token_flips_above_threshold`` the
    C7 limit (None = not gated), ``not_supported`` ``block`` | ``allow``, ``allow_reduced_baseline``: a
    ``--baseline`` report of a reduced suite (``overall.reduced_suite``) may be gated against."""

    name: str = "default"
    source: str = "<default>"
    require: tuple = ()
    allow: tuple = ()
    max_token_flips_above_threshold: Optional[int] = 0
    allow_engine_hash_change: bool = False
    not_supported: str = "block"
    fail_on_unused_expectations: bool = False
    expectations: tuple = ()
    description: str = ""
    allow_reduced_baseline: bool = False

    @property
    def required_families(self) -> frozenset:
        """Scale families that must be bit-identical."""
        return frozenset(f for r in self.require for f in REQUIRE_RULES[r])

    @property
    def allowed_families(self) -> frozenset:
        """Scale families where one spacing is a warning (a ``require`` wins)."""
        return frozenset(f for r in self.allow for f in ALLOW_RULES[r]) - self.required_families

    @property
    def allows_contract_difference(self) -> bool:
        """A difference both declared contracts give warns (module docstring, rule 1)."""
        return CONTRACT_DIFFERENCE in self.allow

    def expectation_for(
        self, check: str, case: Optional[str] = None, layer: Optional[str] = None
    ) -> Optional[Expectation]:
        """The first expectation covering ``check`` on ``case`` / ``layer``, or None."""
        return next((e for e in self.expectations if e.matches(check, case, layer)), None)

    def to_dict(self) -> dict:
        """JSON-able dict (for the gate report)."""
        d = {"name": self.name, "source": self.source, "description": self.description}
        d.update(require=list(self.require), allow=list(self.allow))
        d.update(required_families=sorted(self.required_families), allowed_families=sorted(self.allowed_families))
        flags = ("max_token_flips_above_threshold", "allow_engine_hash_change", "not_supported")
        d.update({k: getattr(self, k) for k in (*flags, "fail_on_unused_expectations", "allow_reduced_baseline")})
        return {**d, "expectations": [e.to_dict() for e in self.expectations]}


def default_policy() -> Policy:
    """The policy of a gate given none: bit identity everywhere (``require: [bit_identical]``, no allow rule), no
    token flip above the threshold, the engine hash must not move."""
    return Policy(
        name="default (bit identity)",
        require=("bit_identical",),
        description="bit identity everywhere, no token flips above the threshold, the engine hash must not move",
    )


def _rules(src: str, key: str, value, known: dict) -> tuple:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        got = type(value).__name__
        raise PolicyError(f"{src}: field '{key}': expected a rule name or a list of rule names, got {got}")
    for x in items:
        if x not in known:
            raise PolicyError(f"{src}: field '{key}': unknown rule {x!r}; known: {', '.join(known)}")
    return tuple(dict.fromkeys(items))


def _bool(src: str, key: str, value, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PolicyError(f"{src}: field '{key}': expected true or false, got {value!r}")
    return value


def _expectation(src: str, i: int, item) -> Expectation:
    where = f"{src}: field 'expectations[{i}]'"
    if not isinstance(item, dict):
        got = type(item).__name__
        raise PolicyError(f"{where}: expected a mapping with check, reason, owner and case or layer, got {got}")
    extra = sorted(set(map(str, item)) - set(_EXP_KEYS))
    if extra:
        raise PolicyError(f"{where}: unknown key {extra[0]!r}; known: {', '.join(_EXP_KEYS)}")
    for k in ("check", "reason", "owner"):
        v = item.get(k)
        if not isinstance(v, str) or not v.strip():
            raise PolicyError(f"{where}.{k}: required, a non-empty string")
    for k in ("case", "layer"):
        if k in item and (not isinstance(item[k], str) or not item[k].strip()):
            raise PolicyError(f"{where}.{k}: expected a non-empty string (an fnmatch pattern)")
    check = item["check"].strip()
    if check not in EXPECTATION_CHECKS:
        raise PolicyError(f"{where}.check: unknown check {check!r}; known: {', '.join(EXPECTATION_CHECKS)}")
    if "case" in item and "layer" in item:
        raise PolicyError(f"{where}: give either case or layer, not both")
    if "case" not in item and "layer" not in item and check not in MODEL_LEVEL:
        raise PolicyError(f"{where}: needs case or layer (only C7 / E1 are model-level)")
    case = item.get("case")
    if case is not None and case.startswith(OLD_TILE_EDGES_PREFIX):  # the tile-edge shapes' former case ids
        case = TILE_EDGES_PREFIX + case[len(OLD_TILE_EDGES_PREFIX) :]
    return Expectation(check, item["reason"].strip(), item["owner"].strip(), case, item.get("layer"), i)


def parse_policy(obj, source: str = "<dict>") -> Policy:
    """Validate a policy mapping (as ``yaml.safe_load`` returns it; None = an empty file = every default).
    Raises PolicyError, one line naming ``source`` (the file) and the field."""
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise PolicyError(f"{source}: top level must be a mapping, got {type(obj).__name__}")
    extra = sorted(set(map(str, obj)) - set(_KEYS))
    if extra:
        raise PolicyError(f"{source}: unknown field {extra[0]!r}; known: {', '.join(_KEYS)}")
    version = obj.get("version", 1)
    if version != 1:
        raise PolicyError(f"{source}: field 'version': {version!r} is not supported (this code reads version 1)")
    name = obj.get("name", "policy" if source.startswith("<") else Path(source).stem)
    if not isinstance(name, str) or not name.strip():
        raise PolicyError(f"{source}: field 'name': expected a non-empty string")
    desc = obj.get("description", "")
    if not isinstance(desc, str):
        raise PolicyError(f"{source}: field 'description': expected a string")
    flips = obj.get("max_token_flips_above_threshold", 0)
    if flips is not None and (isinstance(flips, bool) or not isinstance(flips, int) or flips < 0):
        field = "field 'max_token_flips_above_threshold'"
        raise PolicyError(f"{source}: {field}: expected an integer >= 0 or null, got {flips!r}")
    ns = obj.get("not_supported", "block")
    if ns not in ("block", "allow"):
        raise PolicyError(f"{source}: field 'not_supported': expected block or allow, got {ns!r}")
    exps = obj.get("expectations") or []
    if not isinstance(exps, list):
        raise PolicyError(f"{source}: field 'expectations': expected a list, got {type(exps).__name__}")
    require = _rules(source, "require", obj.get("require"), REQUIRE_RULES)
    allow = _rules(source, "allow", obj.get("allow"), ALLOW_RULES)
    hash_ok, unused_fail, reduced_ok = (
        _bool(source, k, obj.get(k), False)
        for k in ("allow_engine_hash_change", "fail_on_unused_expectations", "allow_reduced_baseline")
    )
    exps = tuple(_expectation(source, i, e) for i, e in enumerate(exps))
    return Policy(name.strip(), source, require, allow, flips, hash_ok, ns, unused_fail, exps, desc, reduced_ok)


#: the shipped policies (package data; ``examples/policies`` in a source checkout points here)
SHIPPED_POLICIES = Path(__file__).resolve().parent / "policies"


def shipped_policy_names() -> list:
    """The names ``--policy`` takes for the shipped policies (``bit-identity``, ...), sorted."""
    return sorted(p.stem for p in SHIPPED_POLICIES.glob("*.yaml"))


def policy_path(name: Union[str, Path]) -> Path:
    """``name`` as a policy file: an existing path as given, else a shipped policy by its name (``bit-identity``, or
    ``bit-identity.yaml``, found wherever int8conf is installed). Raises PolicyError (one line, naming the shipped
    ones) for neither."""
    p = Path(name)
    if p.exists() or p.parent != Path("."):  # a path: read as given (a missing one: "cannot read policy")
        return p
    shipped = SHIPPED_POLICIES / (p.name if p.suffix == ".yaml" else f"{p.name}.yaml")
    if shipped.is_file():
        return shipped
    raise PolicyError(
        f"--policy {name}: no such file and no shipped policy of that name (shipped: "
        f"{', '.join(shipped_policy_names())})"
    )


def load_policy(path: Union[str, Path]) -> Policy:
    """Read and validate a policy YAML file (``yaml.safe_load``): a path, or a shipped policy's name
    (:func:`policy_path`). Raises PolicyError (one line): missing / unreadable file, not YAML, or a bad field."""
    p = policy_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise PolicyError(f"{p}: cannot read policy ({e.strerror or type(e).__name__})") from None
    except UnicodeDecodeError:
        raise PolicyError(f"{p}: not UTF-8 text") from None
    try:
        obj = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PolicyError(f"{p}: not valid YAML{at} ({getattr(e, 'problem', None) or type(e).__name__})") from None
    return parse_policy(obj, str(p))
