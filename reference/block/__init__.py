"""Block-scaled W8A8 (issue 46): per-token-group activation scales and per-block weight scales entering the K loop."""
