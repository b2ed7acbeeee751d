"""The real embedded vLLM (CPU): start, stream, count, stop.

Two server starts: n-gram through the library (with a per-batch-size schedule), and the baseline
through `speclab serve`, stopped by Ctrl-C. What Ctrl-C and SIGTERM each do in the workbook's own
process is in tests/unit/serve/test_launch.py and tests/faults/test_signals.py (a fake engine, every
signal); here the real vLLM's process group must go with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from speclab.measure.client import RequestSpec, Sampling, StreamClient
from speclab.measure.loadgen import SweepConfig, measure_sweep, plan_sweep
from speclab.measure.metrics import scrape_metrics, spec_decode_info, window
from speclab.predict.accuracy import schedule_check
from speclab.prompts import load_builtin
from speclab.runs import Run
from speclab.serve.embedded import SERVED_MODEL_NAME, embedded_option
from speclab.serve.launch import free_port, group_alive
from speclab.serve.target import ServerTarget, serve_target
from speclab.urls import Endpoint
from tests.conftest import no_vllm_running

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("vllm_lock")]


async def _stream(endpoint, model, prompts) -> list:
    async with StreamClient(endpoint, model, sampling=Sampling(max_tokens=96)) as client:
        t0 = time.perf_counter()
        return [await client.send(RequestSpec(request_id=p.id, prompt_id=p.id, category=p.category,
                                              messages=list(p.messages)), t0) for p in prompts]


# n-gram runs with a per-batch-size schedule (the configuration search's kind of restart line):
# k = 4 at batch 1, off from 2; the three prompts below go one at a time, so they draft.
SCHEDULE = [[1, 1, 4], [2, 256, 0]]


def test_ngram_streams_counts_and_runs_its_schedule() -> None:
    prompts = load_builtin(["code_editing"])[:3]
    run = Run.create("it-ngram", {}, kind="test")
    option = embedded_option("ngram").model_copy(update={"extra": {"num_speculative_tokens_per_batch_size": SCHEDULE}})
    with serve_target(ServerTarget(option=option), run) as live:
        pid = live.managed.pid
        assert live.identity.load_time_s and live.identity.load_time_s < 240
        assert live.identity.observed_method == "ngram"
        with httpx.Client() as http:
            before = scrape_metrics(http, live.endpoint)
            records = asyncio.run(_stream(live.endpoint, live.model, prompts))
            after = scrape_metrics(http, live.endpoint)
        counters = window(before, after)
        _assert_counted_exactly(records, counters)
        info = spec_decode_info(after)
        assert info.enabled and info.num_positions == 4
        assert counters.d_accepted_tokens > 0 and counters.acceptance_rate > 0
        # several tokens per chunk is what speculation looks like from the client
        assert max(r.tokens_per_chunk_mean for r in records) > 1.0
        # the server runs the schedule it was given, and 02's check reads it from the streams:
        # at concurrency 4 no engine step at a batch of 2 or more accepts a draft
        assert (live.identity.speculative_config or {}).get("num_speculative_tokens_per_batch_size") == SCHEDULE
        config = SweepConfig(concurrency=[4], per_category=1, max_tokens=48, warmup_requests=0,
                             categories=["code_editing", "extractive_qa", "translation", "multi_turn"])
        sweep = Run.create("it-schedule", {}, kind="test", run_dir=run.path / "schedule")
        measure_sweep(live.endpoint, live.model, config, sweep, plan=plan_sweep(config), arm="ngram",
                      progress=False)
        check = schedule_check(sweep.path, SCHEDULE)
        print(check.to_string(index=False), check.attrs["verdict"])
        off = check[check["k"] == 0].iloc[0]
        assert check.attrs["ok"] and off["steps"] > 0 and off["steps_with_accepted_drafts"] == 0
    manifest = Run.open(run.path).manifest
    assert manifest["server"]["launch_command"].count("--enforce-eager") == 1
    deadline = time.time() + 10
    while group_alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    assert not group_alive(pid)
    assert no_vllm_running()


def _assert_counted_exactly(records: list, counters) -> None:
    assert all(r.ok for r in records), [r.error for r in records]
    assert all(r.output_tokens and r.output_tokens_source in ("usage", "continuous_usage") for r in records)
    # the client's token total is exactly the server's generation-token delta
    assert counters.d_generation_tokens == sum(r.output_tokens for r in records)
    assert counters.d_requests == len(records)


def test_speclab_serve_counts_exactly_and_ctrl_c_leaves_no_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECLAB_OUTPUTS", str(tmp_path / "outputs"))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "speclab.cli", "serve", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        manifest = _serving_manifest(proc, port, tmp_path / "outputs")
        server = manifest["server"]
        assert server["observed_method"] == "baseline" and 0 < server["load_time_s"] < 240
        assert server["launch_command"].count("--enforce-eager") == 1
        endpoint = f"http://127.0.0.1:{port}/v1"
        with httpx.Client() as http:
            before = scrape_metrics(http, Endpoint.parse(endpoint))
            records = asyncio.run(_stream(endpoint, SERVED_MODEL_NAME, load_builtin(["code_editing"])[:3]))
            after = scrape_metrics(http, Endpoint.parse(endpoint))
        counters = window(before, after)
        _assert_counted_exactly(records, counters)
        assert not spec_decode_info(after).enabled
        assert counters.d_drafts is None and counters.acceptance_rate is None
        assert not no_vllm_running()
        proc.send_signal(signal.SIGINT)  # Ctrl-C, as `speclab serve` tells its user
        out, _ = proc.communicate(timeout=60)
    except BaseException:  # never leave a server behind for the next test
        proc.terminate()  # speclab serve stops its vLLM on SIGTERM
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        print(out[-2000:])
        raise
    assert proc.returncode == 130, out
    time.sleep(1)
    assert no_vllm_running(), out
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
    run_dir = next((tmp_path / "outputs").glob("*/*-serve-baseline"))
    assert Run.open(run_dir).manifest["status"] == "interrupted"


def _serving_manifest(proc: subprocess.Popen, port: int, outputs: Path) -> dict:
    """The serve run's manifest once its server answers /health and its identity is recorded."""
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                found = [Run.open(d).manifest for d in outputs.glob("*/*-serve-baseline")]
                if found and found[0].get("server"):
                    return found[0]
        time.sleep(0.5)
    raise AssertionError(proc.stdout.read() if proc.poll() is not None else "never healthy with its identity recorded")
