"""Pre-registered prediction matrices (DESIGN.md section 7): YAML files in
this directory, their append-only ``LOCK`` and amendments.

* :mod:`predictions.matrix`: parse / validate a matrix (``yaml.safe_load``
  only), look a (fault, check, scale mode) cell up, check an amendment's
  change list against the matrix it amends.
* :mod:`predictions.lock`: the LOCK file (SHA-256 per matrix, hash-chained),
  :func:`verify_matrix` (refuses a tampered matrix or an amendment whose
  parent was edited), :func:`lock_matrix`, and the git-history proof.

``v1.yaml`` is the core matrix (63 cells + C8 and E1 columns), committed and
locked before any sweep result existed; ``v1.1.yaml`` amends it after the
pilot sweep.
"""

from predictions.lock import (  # noqa: F401
    LOCK_NAME,
    default_dir,
    lock_matrix,
    matrix_chain,
    read_lock,
    verify_git_history,
    verify_matrix,
)
from predictions.matrix import CORE_CHECKS, EXTRA_CHECKS, PREDICTIONS, PredictionMatrix, check_amendment, parse_matrix  # noqa: F401
