"""EAGLE-3 drafters: check a drafter against its target, predict its acceptance, train one
for the embedded model, and plan Option D (03-eagle3-drafter; method in ``docs/eagle3.md``).

Modules by layer: ``corpus`` (speclab's own training prompts) is vocabulary; ``match`` (the
drafter/target match check on ``config.json`` dicts) and ``plan`` (Option D: storage, data
generation, training time, cost) are analysis; ``train`` (answers, features, head training
and step timing through the server venv) is server; ``workbook`` holds 03's steps (workbook
layer).
"""

__all__ = ["corpus", "match", "plan", "train", "workbook"]
