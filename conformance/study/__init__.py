"""The power-of-two study (``int8conf study pow2``, README.md here): does snapping per-channel weight scales to
powers of two make two W8A8 kernels agree, and what does it cost in accuracy? :mod:`.run` runs the parts in order;
``model_run`` builds the models ``int8conf generate`` / ``perplexity`` run through a kernel.
"""
