"""Per-fault mean / median / max per-cell seconds of a sweep store: python per_fault.py STORE."""
import sqlite3, sys, collections
d = collections.defaultdict(list)
for f, t in sqlite3.connect(sys.argv[1]).execute("select fault, elapsed_s from cells where layer != '*model*'"):
    d[f].append(t)
n = sum(len(v) for v in d.values()); s = sum(sum(v) for v in d.values())
print(f"{n} cells, summed per-cell time {s:.1f} s, mean {1000 * s / max(n, 1):.2f} ms/cell")
for f in sorted(d):
    v = sorted(d[f])
    print(f"  {f}: n={len(v):5d} mean {1000 * sum(v) / len(v):8.2f} ms  median {1000 * v[len(v) // 2]:8.2f} ms"
          f"  max {1000 * v[-1]:8.1f} ms")
