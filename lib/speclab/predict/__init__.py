"""Prediction: what a speculative option would do, from a baseline run alone, and how it
compares with what was measured (01-baseline's predictions, 02's paired comparison; method
in ``docs/predictor.md``).

Modules by layer: ``replay`` (what n-gram or suffix would draft and have accepted),
``ngram_fast`` (vLLM's n-gram lookup compiled with numba), ``costmodel`` (step-time models,
break-even, payback), ``stepparts`` (a step in parts, each growing by what it is, fitted to GPU
step curves; a predicted speedup decomposed into them), ``steptrace`` (engine steps read back from a run's streams),
``levelsim`` (a closed-loop level stepped as continuous batching runs it), ``modecost``
(speculative mode's own cost per engine, version and method, with sources), ``predictions``
(the notebook-facing predictions and predicted-vs-measured checks) and ``compare`` (paired
speedups of two measured arms, losslessness) are analysis; ``calibration`` runs the
verify-cost calibration on real servers (workbook layer).
"""

__all__ = ["calibration", "compare", "costmodel", "levelsim", "modecost", "ngram_fast", "predictions", "replay", "stepparts", "steptrace"]
