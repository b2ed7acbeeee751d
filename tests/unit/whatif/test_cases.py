"""The published cases as a benchmark: scoring on a tiny fixture, and every shipped case runs."""

from __future__ import annotations

import pytest
import yaml

from speclab.whatif import cases
from speclab.whatif.cases import CaseResult, Cell, score

LLAMA_8B = {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 128256}


def entry(name: str, **over: object) -> dict:
    base = {"name": name, "source": "a fixture",
            "model": {"name": "llama-8b", "config": LLAMA_8B, "weight_bits": 16},
            "hardware": {"gpu": "H100", "count": 1, "interconnect": None},
            "parallel": {"tensor": 1}, "engine": {"name": "vllm", "version": "0.32"},
            "option": {"method": "eagle3", "k": 3, "acceptance_length": 2.5, "acceptance_source": "published: x"},
            "workload": {"input_tokens": 1000, "output_tokens": 500},
            "baseline": {"metric": "output_tok_s", "values": {1: 140.0, 64: None}},
            "published": {"metric": "output_tok_s", "speedup_by_concurrency": {1: 1.9, 64: 2.9}}}
    base.update(over)
    return base


def test_scoring_counts_coverage_and_confidently_wrong() -> None:
    cells = [Cell("a", 1, 1.5, None, 1.4, 1.2, 1.6, "win", "published"),      # covered, agrees
             Cell("a", 2, 0.8, None, 1.4, 1.2, 1.6, "win", "published"),      # missed, confidently wrong
             Cell("b", 1, 1.03, None, 0.9, 0.85, 0.97, "lose", "assumed"),    # wrong but within +-5 %
             Cell("b", 4, 0.9, None, 1.0, 0.8, 1.2, "unclear", "assumed"),    # covered, no call
             Cell("c", 8, None, "< 1.0", 0.5, 0.3, 0.7, "lose", "published"),  # a bound: verdict only
             Cell("c", 9, 2.0, None, 1.5, 1.2, 1.8, "win", "published", excluded="inferred concurrency")]
    s = score([CaseResult("fixture", "", None, cells), CaseResult("refused", "", "engine unknown")])
    assert (s["cases"], s["predicted_cases"], s["refused_cases"]) == (2, 1, 1)
    assert (s["cells_scored"], s["covered"]) == (4, 2)
    assert s["coverage"] == pytest.approx(0.5)
    assert (s["confidently_wrong"], s["confidently_wrong_beyond_5pct"], s["cells_beyond_5pct"]) == (2, 1, 4)
    assert (s["agree"], s["unclear"], s["verdict_cells"]) == (2, 1, 5)
    assert s["median_width"] == pytest.approx(((0.4 / 1.4) * 2 + 0.12 / 0.9 + 0.4) / 4, rel=0.3)
    assert s["excluded"] == [("c", 9, "inferred concurrency")]


def test_a_case_beyond_its_acceptance_length_is_reported_not_scored(tmp_path) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump([entry("fine"), entry("unknown engine", engine={"name": "slimserve"}),
                                    entry("no k", option={"method": "mtp", "k": None, "acceptance_length": 2.0})]))
    results = cases.run_cases(path, draws=200)
    fine, slim, nok = results
    assert slim.refusal is not None and "slimserve" in slim.refusal
    assert nok.refusal is not None and "option.k" in nok.refusal
    c1, c64 = fine.cells
    assert c1.scored and c1.published == 1.9
    assert not c64.scored and "exceeds the published acceptance length 2.50" in (c64.excluded or "")
    text = cases.report(results, title="fixture")
    assert "not predicted: The engine 'slimserve' is not in the mode table" in text
    assert "speculation alone cannot do that" in text
    assert "Scores, all scored cells:" in text


def test_every_shipped_case_runs_or_is_refused_with_a_sentence() -> None:
    results = cases.run_cases(draws=200)
    assert len(results) >= 22
    for res in results:
        assert res.refusal is not None or res.cells, res.name
        if res.refusal:
            assert res.refusal.endswith(".") and "\n" not in res.refusal
    s = score(results)
    assert s["confidently_wrong_beyond_5pct"] == 0
