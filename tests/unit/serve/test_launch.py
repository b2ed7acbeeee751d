"""A server launch as data and as a process (speclab.serve.launch): generated command lines, checked
against the engines' real flag names (docs/measurement.md sections 2, 5, 6); launch, health, stop
and every failure path, with fake engines (fault injection)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from speclab.errors import SpeclabError
from speclab.options import SpecOption
from speclab.serve.launch import ManagedServer, ServerLaunch, free_port, group_alive


def flag_value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_vllm_cpu_module_launch_baseline() -> None:
    launch = ServerLaunch(model="/m", python="/venv/bin/python", served_model_name="s", port=8123,
                          dtype="bfloat16", max_model_len=2048, enforce_eager=True)
    cmd = launch.command()
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag_value(cmd, "--model") == "/m"
    assert flag_value(cmd, "--port") == "8123"
    assert flag_value(cmd, "--host") == "127.0.0.1"
    assert flag_value(cmd, "--max-model-len") == "2048"
    assert "--enforce-eager" in cmd
    assert "--speculative-config" not in cmd


def test_vllm_serve_cli_ngram() -> None:
    option = SpecOption(method="ngram", num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4)
    cmd = ServerLaunch(model="moonshotai/Kimi-K2.5", option=option, tensor_parallel_size=8).command()
    assert cmd[:3] == ["vllm", "serve", "moonshotai/Kimi-K2.5"]
    assert flag_value(cmd, "--tensor-parallel-size") == "8"
    assert json.loads(flag_value(cmd, "--speculative-config")) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4,
    }


def test_vllm_suffix_eagle3_draft_model_and_profiler() -> None:
    suffix = ServerLaunch(model="/m", option=SpecOption(method="suffix", num_speculative_tokens=8))
    assert json.loads(flag_value(suffix.command(), "--speculative-config")) == {
        "method": "suffix", "num_speculative_tokens": 8}
    eagle = ServerLaunch(model="/m", option=SpecOption(method="eagle3", model="/head", num_speculative_tokens=3),
                         profiler_dir="/abs/prof")
    cmd = eagle.command()
    assert json.loads(flag_value(cmd, "--speculative-config")) == {
        "method": "eagle3", "model": "/head", "num_speculative_tokens": 3}
    profiler = json.loads(flag_value(cmd, "--profiler-config"))
    assert profiler["profiler"] == "torch" and profiler["torch_profiler_dir"] == "/abs/prof"
    draft = ServerLaunch(model="/m", option=SpecOption(method="draft_model", model="/small", num_speculative_tokens=5))
    assert json.loads(flag_value(draft.command(), "--speculative-config"))["method"] == "draft_model"


def test_extra_flags_and_env_pass_through() -> None:
    launch = ServerLaunch(model="/m", extra_args=["--gpu-memory-utilization", "0.9"], env={"A": "1"})
    assert launch.command()[-2:] == ["--gpu-memory-utilization", "0.9"]
    assert launch.environment() == {"A": "1"}
    assert launch.command_line().startswith("A=1 vllm serve /m")


def test_sglang_eagle3_sets_steps_topk_and_draft_tokens_together() -> None:
    launch = ServerLaunch(engine="sglang", model="/kimi", python="python3", tensor_parallel_size=8,
                          option=SpecOption(method="eagle3", model="/drafter", num_speculative_tokens=3),
                          profiler_dir="/prof")
    cmd = launch.command()
    assert cmd[:3] == ["python3", "-m", "sglang.launch_server"]
    assert flag_value(cmd, "--model-path") == "/kimi"
    assert flag_value(cmd, "--tp-size") == "8"
    assert flag_value(cmd, "--speculative-algorithm") == "EAGLE3"
    assert flag_value(cmd, "--speculative-draft-model-path") == "/drafter"
    # the Kimi-K2.5 recipe: steps 3, topk 1, draft tokens 4 (sglang#19689)
    assert flag_value(cmd, "--speculative-num-steps") == "3"
    assert flag_value(cmd, "--speculative-eagle-topk") == "1"
    assert flag_value(cmd, "--speculative-num-draft-tokens") == "4"
    assert "--enable-metrics" in cmd
    assert launch.environment()["SGLANG_TORCH_PROFILER_DIR"] == "/prof"


def test_sglang_ngram_and_draft_model() -> None:
    cmd = ServerLaunch(engine="sglang", model="/m", option=SpecOption(
        method="ngram", num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4)).command()
    assert flag_value(cmd, "--speculative-algorithm") == "NGRAM"
    assert flag_value(cmd, "--speculative-num-draft-tokens") == "4"
    assert flag_value(cmd, "--speculative-ngram-min-match-window-size") == "2"
    assert flag_value(cmd, "--speculative-ngram-max-match-window-size") == "4"
    cmd = ServerLaunch(engine="sglang", model="/m", option=SpecOption(
        method="draft_model", model="/small", num_speculative_tokens=4)).command()
    assert flag_value(cmd, "--speculative-algorithm") == "STANDALONE"


def test_sglang_suffix_is_refused_clearly() -> None:
    with pytest.raises(SpeclabError, match="no suffix decoding"):
        ServerLaunch(engine="sglang", model="/m", option=SpecOption(method="suffix")).command()


def test_a_drafter_launch_needs_its_model() -> None:
    SpecOption(method="eagle3")  # fine as a declaration of what an external server runs
    with pytest.raises(ValidationError, match="needs 'model'"):
        ServerLaunch(model="/m", option=SpecOption(method="eagle3"))


# --------------------------------------------------------------------------- lifecycle


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


@pytest.mark.usefixtures("no_progress_routing")
def test_a_server_start_shows_the_seconds_it_waited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from speclab.serve.launch import ManagedServer, ServerLaunch, free_port

    script = tmp_path / "server.py"
    script.write_text("import http.server, sys, time\ntime.sleep(1.5)\n"
                      "class H(http.server.BaseHTTPRequestHandler):\n"
                      "    def do_GET(self):\n        self.send_response(200); self.end_headers()\n"
                      "    def log_message(self, *a):\n        pass\n"
                      "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")
    port = free_port()
    monkeypatch.setattr(ServerLaunch, "command", lambda self: [sys.executable, str(script), str(port)])
    launch = ServerLaunch(model="m", port=port, python=sys.executable)
    with ManagedServer(launch, tmp_path / "server.log", health_timeout_s=30, progress=True):
        pass
    err = capsys.readouterr().err
    assert "starting the vllm server" in err and "1s" in err
    with ManagedServer(launch, tmp_path / "server.log", health_timeout_s=30):  # progress off: silent here
        pass
    assert "starting" not in capsys.readouterr().err
