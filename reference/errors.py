"""Error types shared by every int8conf package: a user-caused problem is an ``Int8confError`` whose one-line message
names it; the CLI and the pytest plugin print that line instead of a traceback."""


class Int8confError(Exception):
    """Base class: a user-facing problem described in one line."""


class OperandError(Int8confError, ValueError):
    """A ``scaled_mm`` / ``int_mm`` operand has a wrong dtype, shape, layout or value."""


class ContractError(Int8confError, ValueError):
    """An epilogue contract or kernel spec is malformed."""


class KernelLoadError(Int8confError, ImportError):
    """A ``--kernel`` name could not be resolved, imported or validated."""


class CheckpointError(Int8confError, ValueError):
    """A checkpoint is missing, truncated, not Qwen3, or fails its digests."""


class CaptureError(Int8confError, ValueError):
    """A layer capture or its manifest is inconsistent."""


class PredictionError(Int8confError, ValueError):
    """A prediction matrix, lock file or amendment is malformed or mismatches its lock."""


class SeedError(Int8confError, ValueError):
    """A user seed is not an integer in ``[0, reference.seeds.MAX_SEED]``."""


def first_line(e: BaseException, limit: "int | None" = 300) -> str:
    """First line of ``str(e)``, stripped, cut to ``limit`` chars (None: uncut); a placeholder if ``str(e)`` raises."""
    try:
        s = str(e).strip()
    except Exception as inner:  # noqa: BLE001 -- e.g. a __str__ that raises
        return f"<its message could not be printed: {type(inner).__name__}>"
    return s.splitlines()[0][:limit] if s else ""
