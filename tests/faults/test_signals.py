"""Signals: Ctrl-C and SIGTERM keep what finished, and client workers never outlive the sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.fault_server import FaultServer

LIB = Path(__file__).resolve().parents[2] / "lib"


def start_bench(server: FaultServer, out: Path, *, new_session: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{LIB}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from speclab.cli import main; sys.exit(main())", "bench", "--endpoint", server.url, "--out", str(out),
         "--quiet", "--workers", "2", "--concurrency", "4", "--per-category", "6", "--warmup-requests", "0",
         "--max-tokens", "8"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=new_session)


def wait_for(condition, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def requests_stop_arriving(server: FaultServer) -> bool:
    """No new chat request reaches the server over a second (in-flight ones may finish)."""
    before = server.chat_requests
    time.sleep(1.2)
    return server.chat_requests == before


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_stopping_the_parent_stops_its_workers(tmp_path: Path, how: str) -> None:
    out = tmp_path / "run"
    # 8 chunks x 50 ms: each request takes ~0.4 s, the sweep ~10 s if nobody stops it
    with FaultServer("none", delay_s=0.05) as server:
        proc = start_bench(server, out)
        try:
            assert wait_for(lambda: server.completed >= 4, 30), proc.stderr.read() if proc.poll() else ""
            proc.send_signal(getattr(signal, how))
            rc = proc.wait(timeout=20)
            assert requests_stop_arriving(server)
        finally:
            if proc.poll() is None:
                proc.kill()
        stderr = proc.stderr.read()
    rows = (out / "requests.jsonl").read_text().splitlines()
    assert len(rows) >= 1  # what finished before the signal is on disk
    manifest = json.loads((out / "manifest.json").read_text())
    if how == "SIGTERM":
        assert rc == 143, stderr
        assert manifest["status"] == "terminated"
        assert "Traceback" not in stderr and "terminated" in stderr
    else:
        assert rc == -signal.SIGKILL
        assert manifest["status"] == "running"  # nobody could finalise it: the documented limit


@pytest.mark.parametrize("target", ["process group", "parent only"])
def test_ctrl_c_keeps_what_finished_and_marks_the_run_interrupted(tmp_path: Path, target: str) -> None:
    """README's Reliability row "Ctrl-C": what finished is on disk, the manifest says
    `interrupted`, the exit code is 130 and no worker keeps sending. A terminal's Ctrl-C
    sends SIGINT to the whole foreground process group (the parent and its client workers);
    `kill -INT` of the parent alone is the other way it arrives."""
    out = tmp_path / "run"
    with FaultServer("none", delay_s=0.05) as server:
        proc = start_bench(server, out, new_session=True)
        try:
            assert wait_for(lambda: server.completed >= 4, 30), proc.stderr.read() if proc.poll() else ""
            if target == "process group":
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=20)
            assert requests_stop_arriving(server)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        stderr = proc.stderr.read()
    assert rc == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert sum(1 for row in rows if row.get("error") is None) >= 4  # what finished is kept
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
