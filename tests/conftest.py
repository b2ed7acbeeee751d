"""Shared fixtures: fake engines for fault injection, and the real embedded server."""

from __future__ import annotations

import os
import signal
import stat
import sys
from pathlib import Path

import pytest

FAKES = Path(__file__).parent / "fakes"

# A shell without job control (a CI script's `cmd &`, nohup) starts background jobs with SIGINT
# ignored, Python keeps an inherited SIG_IGN, and every process the tests start inherits it
# too. The signal tests mean what a terminal's Ctrl-C does, so the suite runs with the default.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def fake_python(tmp_path: Path):
    """Factory: an executable that stands in for the server's python, running a fake engine."""

    def make(mode: str) -> str:
        wrapper = tmp_path / f"python-{mode}"
        wrapper.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_engine.py"}" {mode} "$@"\n'
        )
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
        return str(wrapper)

    return make


@pytest.fixture(autouse=True, scope="session")
def _outputs_in_tmp(tmp_path_factory: pytest.TempPathFactory):
    """Runs made by tests go to a temp folder, never into the checkout's outputs/
    (session-wide, so module- and session-scoped fixtures are covered too)."""
    previous = os.environ.get("SPECLAB_OUTPUTS")
    if previous is None:
        os.environ["SPECLAB_OUTPUTS"] = str(tmp_path_factory.getbasetemp() / "outputs")
    yield
    if previous is None:
        os.environ.pop("SPECLAB_OUTPUTS", None)


@pytest.fixture
def vllm_lock():
    """One real vLLM at a time on this 2-core machine (developers and helpers share it)."""
    import fcntl

    with open("/tmp/speclab-vllm.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
        fcntl.flock(handle, fcntl.LOCK_UN)


def no_vllm_running() -> bool:
    import subprocess

    out = subprocess.run(["pgrep", "-f", "vllm.entrypoints.openai.api_server"],
                         capture_output=True, text=True).stdout.split()
    return not [pid for pid in out if int(pid) != os.getpid()]
