"""vLLM's n-gram replay compiled with numba (speclab.predict.ngram_fast) against the plain port in
speclab.predict.replay."""

from __future__ import annotations

import random

import numpy as np

from speclab.predict.ngram_fast import _kmp_start, counter_columns, pack_requests, replay_ngram_batch
from speclab.predict.replay import ngram_propose, replay_ngram_tokens, summarise_steps
from speclab.traffic.gen import generate_rows


def test_compiled_ngram_counters_equal_the_vllm_port_on_random_cases() -> None:
    rng = random.Random(14)
    for _ in range(1500):
        vocab = rng.choice([2, 3, 5, 40])
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(0, 30))]
        output = [rng.randrange(vocab) for _ in range(rng.randrange(0, 50))]
        lo = rng.randint(1, 4)
        hi, k = rng.randint(lo, 6), rng.randint(1, 7)
        max_len = rng.choice([2048, len(prompt) + len(output) // 2 + 1, 4])
        packed = pack_requests([prompt], [output])
        got, fallbacks = replay_ngram_batch(*packed, lo, hi, k, max_len)
        want = summarise_steps(replay_ngram_tokens(prompt, output, lo, hi, k, max_len), k)
        assert dict(zip(counter_columns(k), got[0].tolist(), strict=True)) == {c: want[c] for c in counter_columns(k)}
        assert fallbacks == 0


def test_compiled_kmp_fallback_proposes_what_vllm_port_proposes() -> None:
    rng = random.Random(3)
    for _ in range(800):
        context = [rng.randrange(3) for _ in range(rng.randrange(1, 40))]
        lo = rng.randint(1, 3)
        hi = rng.randint(lo, 5)
        start = _kmp_start(np.array(context, np.int64), len(context), lo, hi)
        want = ngram_propose(context, lo, hi, k=len(context))
        assert (context[start:] if start >= 0 else []) == want


def test_compiled_ngram_batches_many_requests_as_one_at_a_time() -> None:
    rows = list(generate_rows(40, seed=5, ids=True))
    prompts = [r["prompt_token_ids"] for r in rows]
    outputs = [r["output_token_ids"] for r in rows]
    together, _ = replay_ngram_batch(*pack_requests(prompts, outputs), 2, 4, 4, 4096)
    alone = np.vstack([replay_ngram_batch(*pack_requests([p], [o]), 2, 4, 4, 4096)[0] for p, o in zip(prompts, outputs, strict=False)])
    assert (together == alone).all()
    assert together[:, 4].sum() > 0  # something was accepted
