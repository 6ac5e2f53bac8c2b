"""The fault-injection sweep (DESIGN.md sections 5-7): every captured layer x
fault x coverage x scale mode x seed is a cell, every check evaluates every
cell, results go to an embedded SQLite store as cells finish.

* :mod:`conformance.sweep.cells`: the cell grid and the sweep's identity.
* :mod:`conformance.sweep.store`: the SQLite store (one row per cell x check,
  a finished cell is never stored twice; resumable).
* :mod:`conformance.sweep.runner`: what one worker computes for one cell
  (layer cells: C1-C6, C8 + ground truth; model cells: C7, E1).
* :mod:`conformance.sweep.distributed`: run the cells serially, on every
  local core (process pool) or on a Dask distributed cluster; a single
  writer stores what workers return.
"""
