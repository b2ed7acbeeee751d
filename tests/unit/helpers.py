"""Data several unit-test folders share (fixtures are in conftest.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A recorded float32 baseline of the embedded SmolLM2-135M: the n-gram acceptance 04 and
# `speclab explain-seeds --baseline` borrow as a stand-in for the seeds' model.
STAND_IN_RUN = str(ROOT / "tests/data/predict/f32-baseline")

# What the model predicts for the seeds' deployment with its default, assumed acceptance, uniform
# routing and the TP-8 rank's MoE line (tests/unit/moe/test_seeds.py has it per concurrency);
# `speclab explain-seeds` prints the same sentence.
SEEDS_STATEMENT = ("uniform routing, TP-8 rank MoE line: a loss at concurrency 16: -6 % (moe), 32: -7 % "
                   "(communication), 64: -7 % (communication), 128: -8 % (communication); a win at 1 (1.47x), "
                   "2 (1.37x), 4 (1.23x), 8 (1.05x).")

# A given cost model for the traffic replay's day (`--cost-model`, `given_cost_model`).
COST = {"baseline": [{"batch": 1, "step_ms": 20}, {"batch": 8, "step_ms": 24}, {"batch": 32, "step_ms": 40}],
        "verify": {"per_token_s": 0.0015, "overhead_s": 0.001}}
