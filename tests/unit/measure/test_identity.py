"""External mode: what speclab learns from a server, and when it contradicts the user."""

import json
from pathlib import Path

import httpx
import pytest

from speclab.errors import SpeclabError
from speclab.measure.identity import contradictions, probe_server, speculative_config_from_argv
from speclab.options import SpecOption

DATA = Path(__file__).resolve().parents[2] / "data"
METRICS = DATA / "metrics"


def fake_vllm(metrics_file: str, server_info: bool) -> httpx.MockTransport:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        seen.append(path)
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [
                {"id": "smollm2-135m", "root": "/models/smollm2", "max_model_len": 2048}]})
        if path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        if path == "/metrics":
            return httpx.Response(200, text=(METRICS / metrics_file).read_text())
        if path == "/server_info" and server_info:
            return httpx.Response(200, json=json.loads((DATA / "vllm032_server_info_ngram.json").read_text()))
        return httpx.Response(404)

    transport = httpx.MockTransport(handler)
    transport.seen = seen  # type: ignore[attr-defined]
    return transport


def test_probe_reads_models_version_metrics_and_server_info() -> None:
    transport = fake_vllm("vllm_ngram_after.txt", server_info=True)
    ident = probe_server("http://10.0.0.9:8000/v1", transport=transport)
    assert ident.engine == "vllm" and ident.version == "0.32.0"
    assert ident.model_id == "smollm2-135m" and ident.models[0].max_model_len == 2048
    assert ident.spec_counters_present and ident.spec_positions == 4
    assert ident.speculative_config["method"] == "ngram"
    assert ident.observed_method == "ngram" and ident.dtype == "bfloat16"
    assert "vllm:spec_decode_num_drafts" in ident.metric_families
    # the /v1 the user typed never leaks into root paths
    assert "/v1/metrics" not in transport.seen and "/metrics" in transport.seen
    assert contradictions(ident, SpecOption(method="ngram", num_speculative_tokens=4)) == []


def test_declared_ngram_on_a_baseline_server_is_called_out() -> None:
    ident = probe_server("http://h:8000", transport=fake_vllm("vllm_baseline_after.txt", server_info=False))
    assert ident.observed_method == "baseline" and not ident.spec_counters_present
    problems = contradictions(ident, SpecOption(method="ngram"))
    assert len(problems) == 1 and "speculation is NOT on" in problems[0]


def test_declared_baseline_and_wrong_k_on_a_speculating_server() -> None:
    ident = probe_server("http://h:8000", transport=fake_vllm("vllm_ngram_after.txt", server_info=False))
    assert ident.observed_method == "speculative"  # counters say on, no config to name it
    assert "runs speculative decoding" in contradictions(ident, SpecOption())[0]
    wrong_k = contradictions(ident, SpecOption(method="ngram", num_speculative_tokens=8))
    assert wrong_k == ["You declared k=8, but the server's counters have 4 positions (k=4)."]


def test_a_dead_endpoint_is_one_sentence() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(SpeclabError, match="does not answer") as info:
        probe_server("http://h:1", transport=httpx.MockTransport(refuse))
    assert "\n" not in str(info.value)


def test_speculative_config_from_command_lines() -> None:
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--speculative-config",
            '{"method":"ngram","num_speculative_tokens":4}']
    assert speculative_config_from_argv(argv) == {"method": "ngram", "num_speculative_tokens": 4}
    sglang = ["python", "-m", "sglang.launch_server", "--speculative-algorithm", "EAGLE3",
              "--speculative-num-steps=3"]
    parsed = speculative_config_from_argv(sglang)
    assert parsed["method"] == "eagle3" and parsed["speculative_num_steps"] == "3"
    assert speculative_config_from_argv(["vllm", "serve", "m"]) is None
