"""Issue 11 follow-up probe (2026-12-01g): deeper rings and other tile orders for the
Gluon kernel at 8192^3, after probe-2026-12-01f/probe_8192.py measured its opt-in set
(best: gluon 128x256x128 g8 w8 s3, 1,304 TOPS, cuBLAS fp8 1,399 in the same run).

Runs probe_8192.main() with its Gluon list replaced by the opt-in set plus the variants
below; each is first checked bit for bit on the edge shapes, then timed with the rest.
Shared memory per program is STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K bytes (227 KiB at most).
Run on the GPU machine from the repository root: python <this file>
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..", "..", "..")))
os.environ.setdefault("INT8CONF_TRITON_GLUON", "1")
spec = importlib.util.spec_from_file_location(
    "probe_8192", os.path.join(HERE, "..", "probe-2026-12-01f", "probe_8192.py"))
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
_c = probe.bt._c

VARIANTS = [
    _c("gluon", 128, 256, 128, 8, 1, 8, 4),                   # 192 KiB ring
    _c("gluon", 128, 256, 128, 8, 1, 8, 4, persistent=True),
    _c("gluon", 128, 256, 64, 8, 1, 8, 6),                    # 144 KiB, more steps in flight
    _c("gluon", 128, 256, 64, 8, 1, 8, 6, persistent=True),
    _c("gluon", 128, 256, 128, 16, 1, 8, 3, persistent=True),  # wider swizzle group
    _c("gluon", 128, 256, 128, 4, 1, 8, 3),
    _c("gluon", 256, 128, 128, 8, 1, 8, 4),
    _c("gluon", 256, 128, 64, 8, 1, 8, 6, persistent=True),
    _c("gluon", 128, 128, 64, 8, 1, 4, 6),                    # 96 KiB: two programs per SM
]
probe.GLUON = list(dict.fromkeys(probe.GLUON + VARIANTS))

if __name__ == "__main__":
    probe.main()
