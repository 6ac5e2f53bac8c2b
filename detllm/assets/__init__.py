"""Package data of detllm: the prepared integer-only artifact of the shipped default model."""
