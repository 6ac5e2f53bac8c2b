"""Block-scaled W8A8: per-token-group activation scales and per-block weight scales entering the K loop.

:mod:`.contract`: the declaration (block sizes, block accumulation, epilogue); :mod:`.evaluate`: its exact reference;
:mod:`.quantize`: the field's block quantizers, byte for byte."""
