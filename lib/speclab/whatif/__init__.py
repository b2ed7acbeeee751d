"""The what-if: a deployment's speculative-decoding speedup per concurrency, predicted before any
restart from what is known (the published baseline, the model's config.json, the GPU and
interconnect, the parallel layout, the engine and its version, the option and its acceptance),
each part of the step labelled, with a 90 % interval and the value of each input that would flip
the verdict (``speclab whatif``, ``speclab explain-seeds``, ``make bench-whatif``; method in
``docs/whatif.md``).

Modules, all analysis: ``scenario`` (the schema, read from YAML), ``arch`` (a model's shape from
its config), ``hardware`` (the shipped GPU and interconnect tables), ``step`` (the step in parts
and its inputs), ``predict`` (draws, interval, verdict), ``sensitivity`` (flip values, tornado),
``text`` (what the CLI prints), ``plots`` (the tornado figure), ``seeds`` (the seeds' scenario)
and ``cases`` (the published cases as a benchmark, and their scores).
"""

__all__ = ["arch", "cases", "hardware", "plots", "predict", "scenario", "seeds", "sensitivity", "step", "text"]
