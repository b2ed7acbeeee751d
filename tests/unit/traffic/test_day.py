"""Traffic logs: readers, generator, tokenizer, the compiled n-gram replay, batches, the day."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import httpx
import numpy as np
import orjson
import pandas as pd
import pytest

from speclab.cli import main
from speclab.errors import SpeclabError
from speclab.predict.costmodel import predict_speedup
from speclab.sections import read_section
from speclab.traffic.day import (
    acceptance_by,
    concurrency_profile,
    given_cost_model,
    length_bucket,
    predict_day,
)
from speclab.traffic.gen import generate_rows, write_log
from speclab.traffic.logs import iter_log_batches, normalise_row
from speclab.traffic.replay import ReplayOption, iter_options, read_log_replay, replay_log
from speclab.traffic.tokens import ChatTokenizer
from speclab.traffic.workbook import check_against_server
from tests.fakes.tiny_tokenizer import write_tiny_model

COST = {"baseline": [{"batch": 1, "step_ms": 20}, {"batch": 8, "step_ms": 24}, {"batch": 32, "step_ms": 40}],
        "verify": {"per_token_s": 0.0015, "overhead_s": 0.001}}


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("model"))


# --------------------------------------------------------------------------- compiled n-gram


# --------------------------------------------------------------------------- readers


def _write_jsonl(path: Path, rows: list) -> Path:
    with open(path, "wb") as out:
        for row in rows:
            out.write(row if isinstance(row, bytes) else orjson.dumps(row))
            out.write(b"\n")
    return path


def test_readers_take_chat_openai_and_sharegpt_and_count_bad_rows(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "messages": [{"role": "user", "content": "hi"}], "completion": "hello", "tenant": "t1",
         "category": "chat", "timestamp": "2026-01-05T10:00:00Z", "duration_s": 2.5},
        {"request": {"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]},
         "response": {"id": "cmpl-1", "created": 1767607200, "choices": [
             {"finish_reason": "stop", "message": {"content": "answer", "reasoning_content": "think "}}]}},
        {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "u1"},
                                      {"from": "gpt", "value": "a1"}, {"from": "human", "value": "u2"},
                                      {"from": "gpt", "value": "a2"}]},
        b"{not json",
        {"messages": [{"role": "user", "content": "no completion"}]},
        {"prompt_token_ids": [1, 2], "output_token_ids": [3, "x"]},
        {"prompt_token_ids": [1, 2], "output_token_ids": [3, 4.5]},
        {"id": "g", "prompt": "text prompt", "output_token_ids": [5, 6], "timestamp": 100, "end_timestamp": 99},
    ]
    log = _write_jsonl(tmp_path / "log.jsonl", rows)
    batches = list(iter_log_batches(log, batch_size=4))
    assert [b.rows for b in batches] == [4, 4]
    assert [b.first_row for b in batches] == [0, 4]
    records = [r for b in batches for r in b.records]
    assert [r.request_id for r in records] == ["a", "cmpl-1", "c#0", "c#1"]
    chat, openai, first, second = records
    assert chat.timestamp_s == 1767607200.0 and chat.duration_s == 2.5 and chat.tenant == "t1"
    assert openai.completion == "think answer" and openai.timestamp_s == 1767607200.0
    assert openai.messages == [{"role": "user", "content": "q"}] and openai.finish_reason == "stop"
    assert [m["content"] for m in second.messages] == ["s", "u1", "a1", "u2"] and second.completion == "a2"
    assert first.completion == "a1" and len(first.messages) == 2
    bad = [b for batch in batches for b in batch.bad]
    assert [b.row for b in bad] == [3, 4, 5, 6, 7]
    assert "not JSON" in bad[0].reason and "completion" in bad[1].reason
    assert "integers" in bad[2].reason and "integers" in bad[3].reason and "duration" in bad[4].reason


def test_parquet_and_gzip_logs_stream_the_same_records(tmp_path: Path) -> None:
    jsonl = write_log(tmp_path / "log.jsonl", 120, seed=4)
    gz = write_log(tmp_path / "log.jsonl.gz", 120, seed=4)
    parquet = write_log(tmp_path / "log.parquet", 120, seed=4)
    with gzip.open(gz) as unzipped:
        assert unzipped.read() == jsonl.read_bytes()
    a = [r for b in iter_log_batches(jsonl, 50) for r in b.records]
    b = [r for b in iter_log_batches(parquet, 50) for r in b.records]
    assert len(a) == 120 and a == b
    assert [len(x.records) for x in iter_log_batches(parquet, 50)] == [50, 50, 20]
    assert len([r for x in iter_log_batches(jsonl, 50, max_rows=70) for r in x.records]) == 70


def test_missing_log_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(SpeclabError, match="does not exist"):
        next(iter_log_batches(tmp_path / "nope.jsonl"))


# --------------------------------------------------------------------------- generator


def test_generator_is_seeded_and_follows_the_day() -> None:
    a = list(generate_rows(3000, seed=1, ids=True))
    assert list(generate_rows(30, seed=1, ids=True)) == list(generate_rows(30, seed=1, ids=True))
    assert list(generate_rows(30, seed=1, ids=True)) != list(generate_rows(30, seed=2, ids=True))
    hours = np.array([(r["timestamp"] % 86400) / 3600 for r in a])
    assert (np.abs(hours - 15) < 3).sum() > 2.5 * (np.abs((hours + 12) % 24 - 15) < 3).sum()  # peak vs trough
    frame = pd.DataFrame(a)
    assert set(frame["category"]) == {"code-edit", "extraction", "rag-qa", "summarise", "chat"}
    assert all(r["timestamp"] <= s["timestamp"] for r, s in zip(a, a[1:], strict=False))


def test_copy_heavy_categories_accept_more_than_chat(tmp_path: Path) -> None:
    log = write_log(tmp_path / "ids.jsonl", 800, seed=2, ids=True)
    replay = replay_log(log, tmp_path / "run", iter_options([4], []), batch_size=400, progress=False)
    by_cat = acceptance_by(replay.requests, ["category"]).set_index("category")["acceptance_rate"]
    assert by_cat["code-edit"] > by_cat["summarise"] > by_cat["chat"]


# --------------------------------------------------------------------------- tokenizer


def test_tokenizer_renders_the_chat_template_and_appends_eos(model_folder: Path) -> None:
    tok = ChatTokenizer.from_folder(model_folder)
    messages = [{"role": "user", "content": "kalo mi"}]
    assert tok.render(messages) == "<|im_start|>user\nkalo mi<|im_end|>\n<|im_start|>assistant\n"
    rows = [{"messages": messages, "completion": "ren ta", "finish_reason": "stop"},
            {"messages": messages, "completion": "ren ta", "finish_reason": "length"},
            {"prompt_token_ids": [7, 8], "output_token_ids": [9]}]
    records = [normalise_row(r, i)[0] for i, r in enumerate(rows)]
    batch = tok.tokenize(records)
    assert batch.prompts[0] == tok.encode_texts([tok.render(messages)])[0]
    assert batch.prompts[0][0] == tok.tokenizer.token_to_id("<|im_start|>")
    assert batch.outputs[0] == batch.outputs[1] + [tok.eos_id]
    assert list(batch.prompts[2]) == [7, 8] and list(batch.outputs[2]) == [9]
    assert ChatTokenizer.from_state(tok.state()).tokenize(records).prompts == batch.prompts


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


# --------------------------------------------------------------------------- the day


def _requests(rows: list[dict]) -> pd.DataFrame:
    base = {"option": "ngram k=2 (2..4)", "method": "ngram", "k": 2, "tenant": "t", "category": "c",
            "prompt_tokens": 10, "decode_steps": 10, "decode_tokens": 15, "drafts": 8, "draft_tokens": 16,
            "accepted_tokens": 5, "draft_tokens_past_output": 0, "accepted_pos1": 4, "accepted_pos2": 1}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_concurrency_profile_sums_overlaps_per_bin() -> None:
    frame = _requests([
        {"timestamp_s": 0.0, "duration_s": 50.0, "output_tokens": 16},
        {"timestamp_s": 80.0, "duration_s": 140.0, "output_tokens": 16},  # 20 s, 100 s, 20 s in three bins
        {"timestamp_s": 150.0, "duration_s": 10.0, "output_tokens": 16},
        {"timestamp_s": 320.0, "duration_s": None, "output_tokens": 11},  # estimated: 11 tokens x 2 s
    ])
    profile, notes = concurrency_profile(frame, bin_s=100.0, default_step_s=2.0)
    assert profile["bin"].tolist() == [0, 1, 2, 3]
    assert profile["concurrency"].round(6).tolist() == [0.7, 1.1, 0.2, 0.22]
    assert profile["requests"].tolist() == [2, 1, 0, 1]
    assert any("estimated" in n for n in notes)
    with pytest.raises(SpeclabError, match="duration"):
        concurrency_profile(frame, bin_s=100.0)


def test_day_prediction_uses_each_bins_mix_and_the_payback_rule() -> None:
    model = given_cost_model(COST)
    frame = _requests([
        {"timestamp_s": 0.0, "duration_s": 900.0, "output_tokens": 16},
        {"timestamp_s": 900.0, "duration_s": 1800.0, "output_tokens": 16, "accepted_tokens": 12,
         "decode_steps": 4, "decode_tokens": 15},
    ])
    day = predict_day(frame, model, load_time_s=3600.0, bin_s=900.0)
    bins = day.per_bin.set_index("bin")
    assert bins["concurrency"].tolist() == [1.0, 1.0, 1.0]
    first = predict_speedup(model, 1.0, 15 / 10, (10 + 16) / 10)
    assert bins.loc[0, "predicted_speedup"] == pytest.approx(first["speedup"])
    second = predict_speedup(model, 1.0, 15 / 4, (4 + 16) / 4)
    assert bins.loc[1, "predicted_speedup"] == pytest.approx(second["speedup"])
    assert bins.loc[2, "predicted_speedup"] == pytest.approx(
        predict_speedup(model, 1.0, 30 / 14, (14 + 32) / 14)["speedup"])  # no arrivals: the whole log's mix
    row = day.per_option.iloc[0]
    hours = 0.25 * 24 / 0.75
    freed = sum(hours * (1 - 1 / s) for s in bins["predicted_speedup"])
    assert row["server_hours_saved_per_day"] == pytest.approx(freed)
    assert row["payback_hours"] == pytest.approx(1.0 / (freed / 24))
    assert any("scale" in n for n in day.notes)


def test_length_buckets_are_ordered() -> None:
    labels = length_bucket(pd.Series([1, 70, 5000, 64]))
    assert labels.astype(str).tolist() == ["0-63", "64-127", "4096+", "64-127"]


def test_given_cost_model_needs_its_fields() -> None:
    with pytest.raises(SpeclabError, match="baseline"):
        given_cost_model({"verify": {}})


# --------------------------------------------------------------------------- batches, resume, CLI


def test_replay_resumes_from_finished_batches_and_pins_settings(tmp_path: Path) -> None:
    log = write_log(tmp_path / "ids.jsonl", 300, seed=3, ids=True)
    options = iter_options([2, 4], [])
    first = replay_log(log, tmp_path / "run", options, batch_size=100, progress=False)
    assert first.stats["skipped_batches"] == 0 and first.stats["batches"] == 3
    (tmp_path / "run" / "batches" / "batch-000001.parquet").unlink()
    again = replay_log(log, tmp_path / "run", options, batch_size=100, progress=False)
    assert again.stats["skipped_batches"] == 2
    pd.testing.assert_frame_equal(first.requests, again.requests)
    assert len(again.requests) == 600 and set(again.requests["option"]) == {o.label for o in options}
    with pytest.raises(SpeclabError, match="batch_size"):
        replay_log(log, tmp_path / "run", options, batch_size=50, progress=False)
    assert read_log_replay(tmp_path / "run").rows == 300


def test_replay_option_labels_and_vllm_lookup_defaults() -> None:
    assert ReplayOption(method="ngram", k=4, prompt_lookup_min=2, prompt_lookup_max=4).label == "ngram k=4 (2..4)"
    assert ReplayOption(method="ngram", k=3).lookup() == (5, 5)
    assert ReplayOption(method="ngram", k=3, prompt_lookup_max=3).lookup() == (3, 3)
    with pytest.raises(ValueError):
        ReplayOption(method="ngram", k=3, prompt_lookup_min=4, prompt_lookup_max=2)


def test_cli_replay_logs_writes_a_run_with_a_report_section(tmp_path: Path, model_folder: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path / "log.jsonl", 150, seed=6, shape="openai")
    with open(log, "ab") as out:
        out.write(b"garbage\n")
    cost = tmp_path / "cost.yaml"
    cost.write_text(json.dumps(COST))
    run_dir = tmp_path / "outputs" / "replay"
    code = main(["replay-logs", "--log", str(log), "--model", str(model_folder), "--single-process",
                 "--cost-model", str(cost), "--ngram-k", "2,4", "--batch-size", "64", "--quiet",
                 "--resume", str(run_dir)])
    assert code == 0
    out = capsys.readouterr().out
    assert "ngram k=4 (2..4)" in out and "bad row 150: not JSON" in out
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["kind"] == "replay-logs"
    assert manifest["traffic"]["bad_rows"] == 1 and manifest["traffic"]["rows"] == 151
    section = read_section(run_dir)
    assert section is not None and section.kind == "traffic-replay"
    assert {"acceptance_by_category", "day_by_option", "concurrency_profile"} <= set(section.tables)
    assert "day_profile" in section.figures
    day = section.tables["day_by_option"]
    assert day["predicted_speedup"].between(0.2, 5).all() and not math.isnan(day["payback_hours"].iloc[0])


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


def test_idle_hours_count_in_the_span_of_the_day() -> None:
    frame = _requests([{"timestamp_s": 0.0, "duration_s": 1800.0, "output_tokens": 16},
                       {"timestamp_s": 5 * 3600.0, "duration_s": 1800.0, "output_tokens": 16}])
    day = predict_day(frame, given_cost_model(COST), load_time_s=3600.0, bin_s=1800.0)
    assert day.span_hours == 5.5 and day.profile["bin"].tolist() == [0, 10]
    assert day.per_option.iloc[0]["day_mean_concurrency"] == pytest.approx(2 * 0.5 / 5.5)


def test_cli_takes_the_cost_model_and_restart_time_of_a_baseline_run(tmp_path: Path, model_folder: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    baseline = tmp_path / "baseline"
    shutil.copytree(Path(__file__).parents[2] / "data" / "predict" / "f32-baseline", baseline)
    (baseline / "cost_model.json").write_text(json.dumps({"source": "baseline_slope"}))
    manifest = json.loads((baseline / "manifest.json").read_text())
    manifest.setdefault("server", {})["load_time_s"] = 90.0
    (baseline / "manifest.json").write_text(json.dumps(manifest))
    log = write_log(tmp_path / "ids.jsonl", 100, seed=2, ids=True)
    run_dir = tmp_path / "replay"
    assert main(["replay-logs", "--log", str(log), "--model", str(model_folder), "--single-process", "--quiet",
                 "--baseline-run", str(baseline), "--ngram-k", "3", "--resume", str(run_dir)]) == 0
    day = pd.read_parquet(run_dir / "traffic_day.parquet")
    assert day["restart_downtime_h"].tolist() == [pytest.approx(90.0 / 3600)]
    assert main(["replay-logs", "--log", str(log), "--single-process", "--baseline-run", str(baseline),
                 "--cost-model", "x.yaml"]) == 1
    assert "not both" in capsys.readouterr().err


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
