"""The fault suite: `speclab bench` against a server that misbehaves on purpose.

Each scenario runs the real CLI in-process against :class:`FaultServer` and asserts what a
user relies on afterwards: how many records are on disk, the manifest's status, the exit
code, and a single-sentence error. Every scenario is bounded by short timeouts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from speclab.cli import main
from tests.faults.fault_server import FaultServer

REQUESTS = 4  # one category x 4 prompts, one level


def bench(server: FaultServer, out: Path, *extra: str, endpoint: str | None = None) -> int:
    return main([
        "bench", "--endpoint", endpoint or server.url, "--out", str(out), "--quiet",
        "--categories", "summarization", "--per-category", str(REQUESTS), "--concurrency", "2",
        "--warmup-requests", "0", "--max-tokens", "8", "--idle-timeout-s", "0.5", "--request-timeout-s", "2",
        *extra,
    ])


def records(out: Path) -> list[dict]:
    path = out / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def one_sentence(stderr: str) -> str:
    """The CLI's error: one line, no traceback; returns it."""
    lines = [line for line in stderr.splitlines() if line.strip() and "warning:" not in line]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("speclab: ") and lines[0].rstrip().endswith(".")
    return lines[0]


def test_a_healthy_server_is_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FaultServer("none") as server:
        rc = bench(server, tmp_path / "run")
    rows = records(tmp_path / "run")
    assert rc == 0, capsys.readouterr().err
    assert manifest(tmp_path / "run")["status"] == "ok"
    assert len(rows) == REQUESTS and all(r["ok"] and r["output_tokens"] == 8 for r in rows)


@pytest.mark.parametrize("transport", ["fast", "httpx"])
def test_truncated_streams_are_errors_not_short_successes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], transport: str) -> None:
    with FaultServer("truncated", chunks=8) as server:
        rc = bench(server, tmp_path / "run", "--transport", transport)
    rows = records(tmp_path / "run")
    assert rc == 1
    assert manifest(tmp_path / "run")["status"] == "failed"
    assert len(rows) == REQUESTS
    # what arrived is kept, but it is not a success
    assert all(not r["ok"] and r["truncated"] and r["chunks"] == 3 for r in rows)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["levels"][0]["truncated"] == REQUESTS
    assert summary["levels"][0]["output_tok_s"] is None
    assert "truncated stream" in one_sentence(capsys.readouterr().err)


@pytest.mark.parametrize("status", [429, 500, 503])
def test_every_request_refused_is_a_failed_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], status: int) -> None:
    with FaultServer("status", status=status) as server:
        rc = bench(server, tmp_path / "run")
    assert rc == 1
    assert manifest(tmp_path / "run")["status"] == "failed"
    assert len(records(tmp_path / "run")) == REQUESTS
    sentence = one_sentence(capsys.readouterr().err)
    assert f"All {REQUESTS} requests failed" in sentence and f"HTTP {status}" in sentence


@pytest.mark.parametrize("fault", ["stall", "ping"])
def test_stalls_and_ping_only_streams_time_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str) -> None:
    start = time.perf_counter()
    with FaultServer(fault) as server:
        rc = bench(server, tmp_path / "run")
    took = time.perf_counter() - start
    assert rc == 1 and manifest(tmp_path / "run")["status"] == "failed"
    assert len(records(tmp_path / "run")) == REQUESTS
    assert "idle timeout" in one_sentence(capsys.readouterr().err)
    assert took < 10  # 2 rounds of 2 streams x 0.5 s idle timeout, plus setup


def test_the_deadline_ends_a_stream_that_keeps_pinging(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Pings are not data, but a generous idle timeout must still be capped by the deadline.
    with FaultServer("ping") as server:
        rc = bench(server, tmp_path / "run", "--idle-timeout-s", "30", "--request-timeout-s", "0.7")
    assert rc == 1 and manifest(tmp_path / "run")["status"] == "failed"
    rows = records(tmp_path / "run")
    assert len(rows) == REQUESTS and not any(r["ok"] for r in rows)
    assert "request deadline of 0.7 s" in one_sentence(capsys.readouterr().err)


@pytest.mark.parametrize("fault,words", [("malformed", "not JSON"), ("reset", "Connection")])
def test_broken_streams_fail_with_the_cause(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str, words: str) -> None:
    with FaultServer(fault) as server:
        rc = bench(server, tmp_path / "run")
    assert rc == 1 and manifest(tmp_path / "run")["status"] == "failed"
    assert len(records(tmp_path / "run")) == REQUESTS
    assert words.lower() in one_sentence(capsys.readouterr().err).lower()


def test_a_server_killed_mid_run_keeps_what_finished(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FaultServer("kill", after=2) as server:
        rc = bench(server, tmp_path / "run", "--concurrency", "1")
    rows = records(tmp_path / "run")
    assert len(rows) == REQUESTS  # every request is on disk, finished or not
    assert sum(r["ok"] for r in rows) == 2
    assert rc == 3 and manifest(tmp_path / "run")["status"] == "degraded"
    sentence = one_sentence(capsys.readouterr().err)
    assert "2 of 4 requests failed" in sentence


def test_a_server_behind_an_api_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_KEY", "sk-test")
    with FaultServer("auth", api_key="sk-test") as server:
        rc_without = bench(server, tmp_path / "without")
        sentence = one_sentence(capsys.readouterr().err)
        rc_with = bench(server, tmp_path / "with", "--api-key-env", "FAULT_KEY")
        seen = list(server.seen_auth)
    assert rc_without == 1 and "--api-key-env" in sentence and "401" in sentence
    assert records(tmp_path / "without") == []  # refused at the probe: no request was sent
    assert manifest(tmp_path / "without")["status"] == "failed"
    assert rc_with == 0, capsys.readouterr().err
    assert len(records(tmp_path / "with")) == REQUESTS
    # every request of the keyed run (probe, models, metrics, chat) carried the key
    keyed = seen[seen.index("Bearer sk-test"):]
    assert set(keyed) == {"Bearer sk-test"} and len(keyed) > REQUESTS
    text = (tmp_path / "with" / "manifest.json").read_text()
    assert "sk-test" not in text and "FAULT_KEY" in text  # the name is kept, never the key


def test_a_wrong_key_names_the_variable(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_KEY", "sk-wrong")
    with FaultServer("auth", api_key="sk-test") as server:
        rc = bench(server, tmp_path / "run", "--api-key-env", "FAULT_KEY")
    assert rc == 1 and manifest(tmp_path / "run")["status"] == "failed"
    assert records(tmp_path / "run") == []
    assert "$FAULT_KEY" in one_sentence(capsys.readouterr().err)


def test_a_password_in_the_url_is_used_but_never_stored_or_printed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FaultServer("status", status=503) as server:
        url = server.url.replace("http://", "http://bob:hunter2@") + "/v1"
        rc = bench(server, tmp_path / "run", endpoint=url)
        seen = set(server.seen_auth)
    assert rc == 1 and manifest(tmp_path / "run")["status"] == "failed"
    assert len(records(tmp_path / "run")) == REQUESTS
    assert "Basic Ym9iOmh1bnRlcjI=" in seen  # sent, as HTTP Basic auth
    err = capsys.readouterr()
    assert "hunter2" not in err.err + err.out
    for path in (tmp_path / "run").iterdir():
        assert "hunter2" not in path.read_text(errors="replace"), path.name


def test_an_empty_endpoint_is_an_error_not_the_embedded_server(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--endpoint", "", "--out", str(tmp_path / "run"), "--quiet"])
    assert rc == 1 and "--endpoint is empty" in one_sentence(capsys.readouterr().err)
    assert not (tmp_path / "run").exists()
