"""The model pipeline: real W8A8 operands from a Qwen3 model (assets, corpus, training, checkpoints, power-of-two
requantization, capture / replay, W8A8 forward through any ``scaled_mm``). Builds on ``reference``; never imports
``conformance``."""
