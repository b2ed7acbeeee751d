"""The probe's points fitted in the step model's verify form and the LM head's share
(speclab.predict.probefit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclab.predict.probefit import lm_head_ratio

ROOT = Path(__file__).resolve().parents[3]


def test_the_lm_head_share_comes_from_the_model_config() -> None:
    smollm = {"hidden_size": 576, "vocab_size": 49152, "num_hidden_layers": 30, "num_attention_heads": 9,
              "num_key_value_heads": 3, "intermediate_size": 1536}
    assert lm_head_ratio(smollm) == pytest.approx(0.2667, abs=0.001)
    kimi = json.loads((ROOT / "params/examples/kimi-k25-8xpcie/kimi-k25-config.json").read_text())
    assert 0.02 < (lm_head_ratio(kimi) or 0) < 0.06  # 1.2 B of head against ~30 B active a token
    assert lm_head_ratio({"hidden_size": 8}) is None
