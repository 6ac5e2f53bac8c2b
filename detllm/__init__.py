"""detllm: the integer-only Qwen3 engine (no float op between token ids and
int32 logits), used as an end-to-end, tolerance-free oracle for a kernel's
accumulator path."""
