"""Pre-registered prediction matrices (DESIGN.md section 7): YAML files in this directory,
their append-only ``LOCK`` and amendments. :mod:`predictions.matrix` parses and validates
a matrix and checks an amendment's change list; :mod:`predictions.lock` keeps the LOCK
(hash-chained SHA-256 per matrix) and proves a matrix and its history untouched.
"""

from predictions.lock import (  # noqa: F401
    LOCK_NAME,
    default_dir,
    latest_locked,
    lock_matrix,
    matrix_chain,
    read_lock,
    verify_git_history,
    verify_matrix,
)
from predictions.matrix import (  # noqa: F401
    CORE_CHECKS,
    DOMAINS,
    EXTRA_CHECKS,
    PREDICTIONS,
    PredictionMatrix,
    check_amendment,
    parse_matrix,
)
