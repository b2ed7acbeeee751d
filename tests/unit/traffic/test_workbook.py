"""One traffic replay for 01-baseline's `traffic_log`, and the tokenizer checked against a server's
/tokenize (speclab.traffic.workbook)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.sections import read_section
from speclab.traffic.day import given_cost_model
from speclab.traffic.gen import generate_rows, write_log
from speclab.traffic.logs import normalise_row
from speclab.traffic.tokens import ChatTokenizer
from speclab.traffic.workbook import check_against_server
from tests.unit.helpers import COST


def test_tokenizer_check_against_server_reports_mismatches(model_folder: Path) -> None:
    tok = ChatTokenizer.from_folder(model_folder)
    records = [normalise_row(r, i)[0] for i, r in enumerate(generate_rows(3, seed=1))]
    local = tok.tokenize(records).prompts
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body["add_generation_prompt"]))
        index = next(i for i, r in enumerate(records) if r.messages == body["messages"])
        tokens = local[index] if index != 1 else local[index][:-1] + [0]
        return httpx.Response(200, json={"tokens": tokens, "count": len(tokens)})

    rows = check_against_server(tok, records, "http://srv:8000/v1", transport=httpx.MockTransport(handler))
    assert seen == [("/tokenize", True)] * 3
    assert [r["match"] for r in rows] == [True, False, True]
    assert rows[1]["first_difference"] == len(local[1]) - 1


def test_tokenizer_check_carries_the_api_key_and_never_shows_a_password(
        model_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = ChatTokenizer.from_folder(model_folder)
    records = [normalise_row(r, i)[0] for i, r in enumerate(generate_rows(2, seed=1))]
    monkeypatch.setenv("SPECLAB_TEST_KEY", "sekrit")
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(401, json={"error": "Unauthorized"})

    with pytest.raises(SpeclabError, match=r"refused the API key from \$SPECLAB_TEST_KEY") as refused:
        check_against_server(tok, records, "http://srv:8000/v1", transport=httpx.MockTransport(handler),
                             api_key_env="SPECLAB_TEST_KEY")
    assert seen == ["Bearer sekrit"] and "sekrit" not in str(refused.value)

    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500)

    with pytest.raises(SpeclabError) as failed:
        check_against_server(tok, records, "http://me:hunter2@srv:8000", transport=httpx.MockTransport(broken))
    assert "hunter2" not in str(failed.value) and "HTTP 500" in str(failed.value)


def test_baseline_hook_puts_traffic_next_to_the_benchmark_prediction(tmp_path: Path, model_folder: Path) -> None:
    import shutil

    from speclab.params import BaselineParams
    from speclab.traffic.workbook import traffic_for_baseline

    run = tmp_path / "baseline"
    shutil.copytree(Path(__file__).parents[2] / "data" / "predict" / "f32-baseline", run)
    log = write_log(tmp_path / "log.jsonl", 120, seed=8)
    params = BaselineParams(mode="embedded", traffic_log=str(log), traffic_model=str(model_folder),
                            predict_methods=["ngram"], verify_cost="baseline_slope")
    predicted = pd.DataFrame([{"option": "ngram k=4 (2..4)", "category": "all", "concurrency": c,
                               "acceptance_rate": 0.3, "mean_acceptance_length": 2.0, "predicted_speedup": s}
                              for c, s in ((1, 1.2), (4, 0.9))])
    report = traffic_for_baseline(params, run, given_cost_model(COST), predicted, workers=None)
    row = report.comparison.set_index("option").loc["ngram k=4 (2..4)"]
    assert row["benchmark_speedup_min"] == 0.9 and row["benchmark_speedup_max"] == 1.2
    assert 0 < row["traffic_acceptance_rate"] < 1
    assert (run / "traffic" / "batches" / "batch-000000.parquet").exists()
    section = read_section(run)
    assert section is not None and "traffic_vs_benchmark" in section.tables
