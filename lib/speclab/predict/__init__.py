"""Prediction: what a speculative option would do, from a baseline run alone, and how it
compares with what was measured (01-baseline's predictions, 02's paired comparison; method
in ``docs/predictor.md``). Every module is analysis: it reads run folders and parameters only.

- what would be drafted: ``replay`` (what n-gram or suffix would draft and have accepted),
  ``ngram_fast`` (vLLM's n-gram lookup compiled with numba);
- what a step costs: ``timings`` (a run folder's decode timings and engine steps),
  ``steptrace`` (engine steps read back from a run's streams), ``costmodel`` (step-time models,
  Leviathan's formula, break-even), ``probefit`` (the live probe's points fitted),
  ``stepmodel`` (the step model of a run folder, whatever ``verify_cost`` said: its one home),
  ``stepparts`` (a step in parts fitted to GPU step curves), ``ownsteps`` (after the restart: a
  speculative run's own steps split into a draft token's price and speculative mode's cost),
  ``modecost`` (speculative mode's own cost in labelled parts: proposer, overlap lost, CUDA-graph
  mode, instance spread, residual; which engines and versions lose their scheduling overlap);
- the prediction: ``levelsim`` (a closed-loop level stepped as continuous batching runs it),
  ``predictions`` (speedup per category and concurrency with its interval and verdict),
  ``payback`` (what a restart costs and when it pays back), ``configsearch`` (every option at
  k = 1 to 8 and per-batch-size schedules over the expected day: the one restart worth making);
- after the restart: ``accuracy`` (predicted against measured), ``compare`` (paired speedups
  of two measured arms, losslessness).
"""

__all__ = ["accuracy", "compare", "configsearch", "costmodel", "levelsim", "modecost", "ngram_fast", "ownsteps", "payback", "predictions",
           "probefit", "replay", "stepmodel", "stepparts", "steptrace", "timings"]
