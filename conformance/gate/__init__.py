"""``int8conf gate``: may a candidate kernel replace an incumbent?

Modules: ``status`` (the fixed case statuses and the exit codes), ``policy``
(the YAML policy with its expectations), ``isolation`` (every kernel runs in
a child process with a timeout), ``repro`` (re-runnable reproducer of a
crashing or hanging case), ``compare`` (candidate vs incumbent per case and
per model-level check, decided under a policy), ``gate`` (the orchestration,
:func:`conformance.gate.run.run_gate`), ``report`` (Markdown + JSON) and
``junit`` (JUnit XML).
"""
