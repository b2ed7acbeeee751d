"""Production traffic: predict a speculative option's day from the requests a server really
served (``speclab replay-logs``, 01-baseline's ``traffic_log``; method in ``docs/traffic.md``).

Modules by layer: ``logs`` (logs read in batches), ``gen`` (a seeded synthetic log),
``tokens`` (the served model's tokenizer and chat template), ``replay`` (batches replayed in
one process or on Ray, resumable), ``day`` (acceptance per group, concurrency from
timestamps, tok/s, hours saved, payback) and ``plots`` are analysis; ``workbook`` runs one
replay for the CLI and 01-baseline and checks tokenisation against a live server (workbook
layer).
"""

__all__ = ["day", "gen", "logs", "plots", "replay", "tokens", "workbook"]
