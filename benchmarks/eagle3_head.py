"""The trained EAGLE-3 head on the embedded server: baseline vs drafter at concurrency 1,
side by side in one run, plus the offline prediction of its per-position acceptance.

    flock /tmp/speclab-vllm.lock .venv/bin/python benchmarks/eagle3_head.py [HEAD_DIR] [--per-category N]

Held-out prompts (``--prompts``): ``benchmark``, the benchmark's own (`data/prompts/`), or
``corpus``, new prompts drawn from the training corpus's templates with another seed and
kept only where they differ from every training prompt (what the head was built for, never
seen by it). Prints tok/s per arm and category, the speedup, and per-position acceptance
measured from counter deltas next to the offline prediction over the baseline's own greedy
token ids.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx

from speclab.eagle3.corpus import training_corpus
from speclab.eagle3.train import DEFAULT_PROMPTS, ensure_trained_head, evaluate_head
from speclab.measure.metrics import scrape_metrics, window
from speclab.options import SpecOption
from speclab.prompts import BUILTIN_CATEGORIES, Prompt, load_builtin
from speclab.serve.embedded import SERVED_MODEL_NAME, embedded_launch
from speclab.serve.launch import ManagedServer, free_port


def serve_and_time(option: SpecOption, prompts: list, max_tokens: int, log: Path) -> tuple[list[dict], object]:
    rows = []
    with ManagedServer(embedded_launch(option, port=free_port()), log) as server, httpx.Client(timeout=300) as client:
        url = server.endpoint.root + "/v1/chat/completions"
        warm = {"model": SERVED_MODEL_NAME, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
        client.post(url, json=warm)
        before = scrape_metrics(client, server.endpoint)
        for p in prompts:
            body = {"model": SERVED_MODEL_NAME, "messages": list(p.messages), "max_tokens": max_tokens,
                    "temperature": 0.0, "return_token_ids": True}
            start = time.perf_counter()
            data = client.post(url, json=body).json()
            e2e = time.perf_counter() - start
            ids = data["choices"][0]["token_ids"]
            rows.append({"id": p.id, "category": p.category, "e2e_s": e2e, "tokens": len(ids),
                         "prompt_token_ids": data["prompt_token_ids"], "output_token_ids": ids})
        counters = window(before, scrape_metrics(client, server.endpoint))
    return rows, counters


def unseen_corpus_prompts(per_category: int, training_prompts: int = DEFAULT_PROMPTS) -> list[Prompt]:
    """Prompts from the training corpus's templates (another seed) that no training prompt equals."""
    seen = {repr(item["messages"]) for item in training_corpus(training_prompts)}
    picked: dict[str, list[Prompt]] = {c: [] for c in BUILTIN_CATEGORIES}
    for item in training_corpus(40 * per_category * len(BUILTIN_CATEGORIES), seed=20261201):
        bucket = picked[item["category"]]
        if repr(item["messages"]) not in seen and len(bucket) < per_category:
            bucket.append(Prompt(id=item["id"].replace("train-", "unseen-"), category=item["category"],
                                 messages=tuple(item["messages"])))
    return [p for c in BUILTIN_CATEGORIES for p in picked[c]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("head", nargs="?", default=None)
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompts", choices=["benchmark", "corpus"], default="benchmark")
    a = ap.parse_args()
    head = Path(a.head) if a.head else ensure_trained_head()
    if a.prompts == "corpus":
        prompts = unseen_corpus_prompts(a.per_category)
    else:
        prompts = [p for c in BUILTIN_CATEGORIES for p in load_builtin([c])[: a.per_category] if p.messages]
    print(f"prompts: {a.prompts} ({len(prompts)})")
    work = Path(tempfile.mkdtemp(prefix="speclab-eagle3-bench-"))
    base, _ = serve_and_time(SpecOption(), prompts, a.max_tokens, work / "baseline.log")
    spec, counters = serve_and_time(SpecOption(method="eagle3", model=str(head), num_speculative_tokens=3),
                                    prompts, a.max_tokens, work / "eagle3.log")
    tokens = work / "baseline-tokens.jsonl"
    tokens.write_text("".join(json.dumps({k: r[k] for k in ("id", "category", "prompt_token_ids", "output_token_ids")}) + "\n"
                              for r in base))
    offline = evaluate_head(head, tokens, work / "offline.json", steps=3)
    print(f"head: {head}")
    print(f"{'category':18s} {'base tok/s':>10s} {'eagle3 tok/s':>12s} {'speedup':>8s} {'same output':>12s}")
    for category in [*BUILTIN_CATEGORIES, "all"]:
        b = [r for r in base if category in ("all", r["category"])]
        s = [r for r in spec if category in ("all", r["category"])]
        if not b:
            continue
        bt = sum(r["tokens"] for r in b) / sum(r["e2e_s"] for r in b)
        st = sum(r["tokens"] for r in s) / sum(r["e2e_s"] for r in s)
        same = sum(x["output_token_ids"] == y["output_token_ids"] for x, y in zip(b, s, strict=True))
        print(f"{category:18s} {bt:10.1f} {st:12.1f} {st / bt:8.2f}x {same:>6d}/{len(b)}")
    measured = counters.per_position_rates
    predicted = offline["overall"]["per_position_acceptance"]
    print("per-position acceptance, measured (counters):", [round(x, 3) for x in measured or []],
          f"mean acceptance length {counters.mean_acceptance_length:.2f}")
    print("per-position acceptance, predicted offline:  ", [round(x, 3) for x in predicted],
          f"mean acceptance length {offline['overall']['mean_acceptance_length']:.2f}")


if __name__ == "__main__":
    main()
