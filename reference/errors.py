"""Error types shared by every int8conf package.

Every error a user can cause (bad operand, bad file, bad option) is an
``Int8confError`` whose message is one line naming the problem (shape, dtype,
file, field). The CLI and the pytest plugin print that line instead of a
traceback.
"""


class Int8confError(Exception):
    """Base class: a user-facing problem described in one line."""


class OperandError(Int8confError, ValueError):
    """An operand of ``scaled_mm`` / ``int_mm`` has the wrong dtype, shape,
    layout or value (e.g. NaN/inf/zero scale, K=0)."""


class ContractError(Int8confError, ValueError):
    """An epilogue contract or kernel spec is malformed."""


class KernelLoadError(Int8confError, ImportError):
    """A ``--kernel`` name could not be resolved, imported or validated."""


class CheckpointError(Int8confError, ValueError):
    """A checkpoint directory or safetensors file is missing, truncated,
    not a Qwen3 checkpoint, or its digests do not match."""


class CaptureError(Int8confError, ValueError):
    """A layer capture or its manifest is inconsistent (digest mismatch,
    capture from a different model, missing layer)."""


class PredictionError(Int8confError, ValueError):
    """A prediction matrix, lock file or amendment is malformed or its digest
    does not match its lock."""


class SeedError(Int8confError, ValueError):
    """A seed given by the user is not an integer in the accepted range
    (``reference.seeds``)."""


def first_line(e: BaseException, limit: "int | None" = 300) -> str:
    """The first line of ``str(e)``, stripped and cut to ``limit`` characters
    (None: uncut; "" for an empty message). A user kernel's exception may not even print
    (its ``__str__`` raises): then a placeholder naming that, never a new error.
    """
    try:
        s = str(e).strip()
    except Exception as inner:  # noqa: BLE001 -- e.g. a __str__ that raises
        return f"<its message could not be printed: {type(inner).__name__}>"
    return s.splitlines()[0][:limit] if s else ""
