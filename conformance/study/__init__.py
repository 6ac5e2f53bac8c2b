"""The power-of-two study (``int8conf study pow2``): does snapping per-channel
weight scales to powers of two make two W8A8 kernels agree, layer by layer and
token by token, and what does it cost in accuracy?

One module per part: :mod:`~conformance.study.reconstruction` (reconstruction gate, both
quantization rules), :mod:`~conformance.study.layer_agreement`,
:mod:`~conformance.study.e2e_agreement`, :mod:`~conformance.study.accuracy`
(with :mod:`~conformance.study.bootstrap`), :mod:`~conformance.study.flips`,
:mod:`~conformance.study.report` and :mod:`~conformance.study.plots`;
:mod:`~conformance.study.arms` builds the model arms and
:mod:`~conformance.study.run` runs the parts in order, resumably.
"""
