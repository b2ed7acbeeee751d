"""`speclab explain-seeds` (speclab.cli.server): the seeds' case in parts, printed."""

from __future__ import annotations

from tests.unit.helpers import SEEDS_STATEMENT, STAND_IN_RUN


def test_explain_seeds_prints_the_parts_with_labels(capsys) -> None:
    from speclab.cli import main

    code = main(["explain-seeds", "--routing", "uniform"])
    out = capsys.readouterr().out
    assert code == 0 and SEEDS_STATEMENT in out
    assert "Speedup in parts, uniform routing, TP-8 rank MoE line" in out
    for header in ("acceptance (assumed)", "communication (borrowed)", "attention (fitted)", "moe (fitted)",
                   "spec_mode_overhead (borrowed)", "unexplained (fitted)"):
        assert header in out
    assert "voipmonitor/rtx6kpro" in out and "vllm#49548" in out


def test_explain_seeds_with_budgets_names_the_stand_in(capsys) -> None:
    from speclab.cli import main

    code = main(["explain-seeds", "--routing", "uniform", "--moe-curve", "tp8-rank", "--moe", "--baseline",
                 STAND_IN_RUN])
    out = capsys.readouterr().out
    assert code == 0 and "best_budget" in out and "SmolLM2-135M stand-in" in out
