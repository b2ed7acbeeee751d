"""Launch, health, stop and every failure path, with fake engines (fault injection)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from speclab.errors import SpeclabError
from speclab.serve.launch import ManagedServer, ServerLaunch, free_port, group_alive


def launch_for(python: str, port: int | None = None, model: str = "org/model") -> ServerLaunch:
    return ServerLaunch(model=model, python=python, port=port or free_port())


def test_healthy_start_measures_load_time_and_stops_the_group(fake_python, tmp_path: Path) -> None:
    server = ManagedServer(launch_for(fake_python("healthy")), tmp_path / "server.log")
    with server:
        assert server.load_time_s is not None and 0 < server.load_time_s < 30
        pid = server.pid
        assert pid and group_alive(pid)
    assert not group_alive(pid)
    assert "speclab launch:" in (tmp_path / "server.log").read_text()


def test_sigterm_ignored_falls_back_to_sigkill(fake_python, tmp_path: Path) -> None:
    server = ManagedServer(launch_for(fake_python("stubborn")), tmp_path / "s.log", stop_grace_s=1)
    server.start()
    pid = server.pid
    t0 = time.perf_counter()
    code = server.stop()
    assert code == -signal.SIGKILL
    assert time.perf_counter() - t0 < 10
    assert not group_alive(pid)


def test_engine_that_exits_gives_one_sentence_and_the_log_tail(fake_python, tmp_path: Path) -> None:
    with pytest.raises(SpeclabError) as info:
        ManagedServer(launch_for(fake_python("exit")), tmp_path / "s.log").start()
    err = info.value
    assert "exited with code 3 before it became healthy" in err.message
    assert "\n" not in err.message
    tail = err.detail.splitlines()
    assert tail[-1] == "ERROR: fake engine failed on purpose"
    assert len(tail) == 20


def test_engine_that_never_becomes_healthy_times_out_and_is_stopped(fake_python, tmp_path: Path) -> None:
    server = ManagedServer(launch_for(fake_python("hang")), tmp_path / "s.log", health_timeout_s=2)
    with pytest.raises(SpeclabError, match="did not become healthy within 2 s"):
        server.start()
    assert server.pid and not group_alive(server.pid)


def test_port_in_use_is_refused_before_launch(fake_python, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SpeclabError, match=f"Port {port} on 127.0.0.1 is already in use"):
            ManagedServer(launch_for(fake_python("healthy"), port), tmp_path / "s.log").start()


def test_missing_model_path_is_refused(fake_python, tmp_path: Path) -> None:
    launch = launch_for(fake_python("healthy"), model=str(tmp_path / "no-such-model"))
    with pytest.raises(SpeclabError, match="does not exist"):
        ManagedServer(launch, tmp_path / "s.log").start()


def test_missing_interpreter_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpeclabError, match="interpreter .* does not exist"):
        ManagedServer(launch_for(str(tmp_path / "nope" / "python")), tmp_path / "s.log").start()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_killing_the_workbook_leaves_no_server(fake_python, tmp_path: Path, sig: int) -> None:
    """The workbook process is killed mid-run; its server must not survive it."""
    python = fake_python("healthy")
    pidfile = tmp_path / "server.pid"
    script = textwrap.dedent(f"""
        import time
        from speclab.serve.launch import ManagedServer, ServerLaunch, free_port
        launch = ServerLaunch(model="org/m", python={python!r}, port=free_port())
        with ManagedServer(launch, {str(tmp_path / 's.log')!r}) as server:
            open({str(pidfile)!r}, "w").write(str(server.pid))
            time.sleep(120)
    """)
    workbook = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.time() < deadline, "the fake server never started"
        time.sleep(0.1)
    server_pid = int(pidfile.read_text())
    assert group_alive(server_pid)
    os.kill(workbook.pid, sig)
    workbook.wait(timeout=30)
    deadline = time.time() + 15
    while group_alive(server_pid) and time.time() < deadline:
        time.sleep(0.2)
    assert not group_alive(server_pid), f"server survived {signal.Signals(sig).name}"
