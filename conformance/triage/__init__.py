"""Triage of a failing check: where the bug lives (issue 43, first slice).

``reshape`` (a case's operands at another shape, layout and scale forms kept), ``flips`` (its categorical
variants), ``boundary`` (the M / N / K boundary the failure switches at, and which flips keep it), ``minimal``
(the smallest failing shape on the failing side of every boundary, then the fewest non-zero operand elements).
README.md here.
"""
