"""A head trained by speclab's pipeline is an EAGLE-3 head for the embedded model.

Short on purpose: the smoke recipe (48 training prompts, 45 s of training), cached; the demo's
head is the `make train-drafter` one (280 prompts, 8 minutes). That vLLM 0.32 loads this same
head, drafts with it, and that the offline replay of the served token ids predicts the served
position-0 acceptance is checked on 03-eagle3-drafter's smoke run, which serves it
(`tests/notebooks/test_workbook.py`): one vLLM start, not two.
"""

from __future__ import annotations

import json

import pytest

from speclab.eagle3.train import SMOKE_HEAD, ensure_trained_head

pytestmark = pytest.mark.integration


def test_the_smoke_recipe_trains_an_eagle3_head_for_the_embedded_model(vllm_lock) -> None:
    head = ensure_trained_head(**SMOKE_HEAD)  # trains (a server start) only when not cached: hold the lock
    config = json.loads((head / "config.json").read_text())
    note = config["speclab_training"]
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == 4096
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    assert note["steps"] > 10 and len(note["held_out_per_position_acceptance"]) == 3
