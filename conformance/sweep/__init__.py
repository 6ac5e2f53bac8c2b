"""The fault-injection sweep (DESIGN.md sections 5-7; ``conformance/sweep/README.md``): the
cell grid (``cells``), the SQLite store (``store``), what a worker computes per cell
(``runner``), the executors (``distributed``) and the scoring (``scoring``, ``scorecard``).
"""
