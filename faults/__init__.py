"""The fault classes of DESIGN.md section 5 (``catalogue``: the single
table of their ids, names and families)."""
