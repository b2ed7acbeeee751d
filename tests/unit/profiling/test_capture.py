"""capture_profile against a stand-in server: window, blocking stop, collection, errors."""

from __future__ import annotations

import http.server
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from speclab.errors import SpeclabError
from speclab.profiling.capture import capture_profile, collect_traces, wait_for_traces
from speclab.runs import Run
from speclab.urls import Endpoint

FIXTURE = next((Path(__file__).resolve().parents[2] / "data" / "traces" / "h200-qwen2moe").glob("*.gz"))


class FakeProfiler:
    """Answers /start_profile and /stop_profile like vLLM: stop blocks, then the traces appear."""

    def __init__(self, trace_dir: Path, stop_delay_s: float = 0.3, status: int = 200) -> None:
        self.trace_dir = trace_dir
        self.stop_delay_s = stop_delay_s
        self.status = status
        self.calls: list[tuple[str, bytes]] = []
        self.keys: list[str | None] = []

    def serve(self) -> Iterator[Endpoint]:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.calls.append((self.path, body))
                owner.keys.append(self.headers.get("Authorization"))
                if self.path == "/stop_profile" and owner.status == 200:
                    time.sleep(owner.stop_delay_s)
                    shutil.copy(FIXTURE, owner.trace_dir / "rank0.123.pt.trace.json.gz")
                    (owner.trace_dir / "rank0.profiler_out.txt").write_text("table\n")
                self.send_response(owner.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield Endpoint.parse(f"http://127.0.0.1:{server.server_address[1]}")
        finally:
            server.shutdown()


class Live:
    def __init__(self, endpoint: Endpoint, api_key_env: str | None = None) -> None:
        self.endpoint = endpoint
        self.api_key_env = api_key_env
        self.model = "fake"
        self.managed = None
        self.identity = type("Identity", (), {"engine": "vllm"})()


@pytest.fixture
def fake_load(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """measure_sweep replaced by a load that runs for a second."""
    seen: list[dict[str, Any]] = []

    def load(endpoint: Any, model: str, config: Any, run: Run, *, plan: Any, arm: str, progress: bool) -> None:
        seen.append({"arm": arm, "concurrency": config.concurrency, "max_tokens": config.max_tokens,
                     "ignore_eos": config.ignore_eos, "api_key_env": config.api_key_env,
                     "requests": len(plan.requests)})
        time.sleep(1.0)

    monkeypatch.setattr("speclab.measure.loadgen.measure_sweep", load)
    return seen


def test_capture_collects_the_new_traces(tmp_path: Path, fake_load: list[dict[str, Any]]) -> None:
    trace_dir = tmp_path / "server"
    trace_dir.mkdir()
    (trace_dir / "rank0.old.pt.trace.json.gz").write_bytes(b"old")  # from an earlier window
    fake = FakeProfiler(trace_dir)
    run = Run.create("profile", {}, kind="profile", run_dir=tmp_path / "run")
    for endpoint in fake.serve():
        result = capture_profile(Live(endpoint), run, window_s=0.3, warmup_s=0.1, concurrency=2,
                                 max_tokens=64, trace_dir=trace_dir)
    assert [p for p, _ in fake.calls] == ["/start_profile", "/stop_profile"]
    assert [p.name for p in result.traces] == ["rank0.123.pt.trace.json.gz"]
    assert result.traces[0].parent == run.path / "traces"
    assert [p.name for p in result.side_files] == ["rank0.profiler_out.txt"]
    assert result.stop_s >= 0.3 and 0.3 <= result.window_s < 1.0
    assert result.load_running_at_stop
    # rounds (2) x concurrency (2) requests, not whole categories (one per category would be 7)
    assert fake_load == [{"arm": "profile", "concurrency": [2], "max_tokens": 64, "ignore_eos": True,
                          "api_key_env": None, "requests": 4}]
    assert (run.path / "profile_capture.json").exists()


def test_sglang_gets_its_json_body(tmp_path: Path, fake_load: list[dict[str, Any]]) -> None:
    fake = FakeProfiler(tmp_path)
    for endpoint in fake.serve():
        capture_profile(Live(endpoint), tmp_path / "run", engine="sglang", window_s=0.2, warmup_s=0.0,
                        trace_dir=tmp_path, sglang_output_dir="/srv/traces")
    start_body = fake.calls[0][1]
    assert b'"activities":["CPU","GPU"]' in start_body and b'"/srv/traces"' in start_body


def test_a_server_without_profiler_is_one_sentence(tmp_path: Path, fake_load: list[dict[str, Any]]) -> None:
    fake = FakeProfiler(tmp_path, status=404)
    for endpoint in fake.serve():
        with pytest.raises(SpeclabError, match="without a profiler"):
            capture_profile(Live(endpoint), tmp_path / "run", window_s=0.1, warmup_s=0.0, trace_dir=tmp_path)


def test_an_external_server_needs_a_trace_dir(tmp_path: Path) -> None:
    live = Live(Endpoint.parse("http://127.0.0.1:9"))
    with pytest.raises(SpeclabError, match="trace_dir"):
        capture_profile(live, tmp_path / "run")


def test_collect_traces_from_a_folder_or_files(tmp_path: Path) -> None:
    source = tmp_path / "copied-from-the-host"
    source.mkdir()
    shutil.copy(FIXTURE, source / "rank0.1.pt.trace.json.gz")
    shutil.copy(FIXTURE, source / "rank1.1.pt.trace.json.gz")
    (source / "notes.md").write_text("not a trace")
    traces, sides = collect_traces(source, tmp_path / "run")
    assert sorted(p.name for p in traces) == ["rank0.1.pt.trace.json.gz", "rank1.1.pt.trace.json.gz"]
    assert sides == []
    traces, _ = collect_traces([source / "rank1.1.pt.trace.json.gz"], tmp_path / "run2")
    assert [p.name for p in traces] == ["rank1.1.pt.trace.json.gz"]
    assert wait_for_traces(source, {}, timeout_s=1.0, settle_s=0.2, expect=2)


def test_a_server_behind_an_api_key_gets_it_on_every_call(
        tmp_path: Path, fake_load: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECLAB_PROFILE_KEY", "k-123")
    fake = FakeProfiler(tmp_path)
    for endpoint in fake.serve():
        capture_profile(Live(endpoint, "SPECLAB_PROFILE_KEY"), tmp_path / "run", window_s=0.2, warmup_s=0.0,
                        trace_dir=tmp_path)
    assert fake.keys == ["Bearer k-123", "Bearer k-123"]
    assert fake_load[0]["api_key_env"] == "SPECLAB_PROFILE_KEY"  # the load carries it too
    refusing = FakeProfiler(tmp_path / "x", status=401)
    for endpoint in refusing.serve():
        with pytest.raises(SpeclabError, match=r"refused the API key from \$SPECLAB_PROFILE_KEY"):
            capture_profile(Live(endpoint, "SPECLAB_PROFILE_KEY"), tmp_path / "run2", window_s=0.1, warmup_s=0.0,
                            trace_dir=tmp_path)
