"""Block-scaled W8A8 (issue 46): quantizers, reference and declarations for per-group / per-block scales."""
