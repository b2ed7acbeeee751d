"""A head trained by speclab's pipeline loads in vLLM 0.32, drafts, and the offline replay of
the same token ids predicts the served per-position acceptance.

Short on purpose (CI: ~3 min): 48 training prompts, 45 s of training; the demo's head is the
cached `make train-drafter` one (280 prompts, 8 minutes). Tolerance for offline vs served
position-0 acceptance: 0.15 absolute - the offline count averages every answer row, the
server drafts only from the last accepted token, and bf16 verification batches differently.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from speclab.eagle3.train import SMOKE_HEAD, ensure_trained_head, evaluate_head, generate_answers
from speclab.measure.metrics import scrape_metrics, window
from speclab.options import SpecOption
from speclab.prompts import load_builtin
from speclab.serve.embedded import embedded_launch
from speclab.serve.launch import ManagedServer, free_port

pytestmark = pytest.mark.integration


def test_a_trained_head_loads_in_vllm_and_the_offline_replay_predicts_its_acceptance(tmp_path: Path, vllm_lock) -> None:
    # the smoke recipe, cached: 03's smoke notebook run reuses this head
    head = ensure_trained_head(**SMOKE_HEAD)
    config = json.loads((head / "config.json").read_text())
    note = config["speclab_training"]
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == 4096
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    assert note["steps"] > 10 and len(note["held_out_per_position_acceptance"]) == 3

    # held-out prompts: the benchmark's own, never seen in training
    prompts = [{"id": p.id, "category": p.category, "messages": list(p.messages)}
               for p in load_builtin(["code_editing", "summarization"])[:3] + load_builtin(["extractive_qa"])[:3]]
    option = SpecOption(method="eagle3", model=str(head), num_speculative_tokens=3)
    with ManagedServer(embedded_launch(option, port=free_port()), tmp_path / "server.log") as server, \
            httpx.Client(timeout=60) as client:
        before = scrape_metrics(client, server.endpoint)
        served = generate_answers(server.endpoint.root, prompts, tmp_path / "served.jsonl", max_tokens=96, concurrency=1)
        counters = window(before, scrape_metrics(client, server.endpoint))
    assert counters.d_drafts and counters.d_drafts > 20
    measured_p0 = counters.per_position_rates[0]
    offline = evaluate_head(head, served, tmp_path / "offline.json", steps=3)
    predicted_p0 = offline["overall"]["per_position_acceptance"][0]
    assert measured_p0 > 0.05, counters  # a random head accepts ~0
    assert abs(predicted_p0 - measured_p0) < 0.15, (predicted_p0, measured_p0)
