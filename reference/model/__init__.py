"""The model pipeline: real W8A8 operands from a Qwen3 model.

Shipped assets (``assets/``: corpus, default model, captures), the corpus
and tokenizer readers, default-model training, Hugging Face checkpoint I/O,
compressed-tensors W8A8 checkpoints, power-of-two requantization, layer
capture and replay, and the W8A8 forward through any ``scaled_mm``. Builds on
the numerics of ``reference``; never imports ``conformance``.
"""
