"""What is really running behind an endpoint (external mode), and whether it is what you think.

The motivating team learnt only by reading ``ps`` that speculation was not on. Here the
server is asked directly: ``/version``, ``/v1/models``, the ``/metrics`` families (spec
counters present = speculation on; distinct ``position`` labels = k), vLLM's dev-mode
``/server_info``, SGLang's ``/get_server_info``, and, for a process on this host, its
command line from /proc.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import httpx

from speclab.auth import auth_headers, auth_refused, basic_auth_headers
from speclab.errors import SpeclabError
from speclab.measure.metrics import parse_metrics, spec_decode_info
from speclab.options import SpecOption
from speclab.runfolder import ModelCard, ServerIdentity
from speclab.runs import redact_argv
from speclab.urls import Endpoint, is_local_host, strip_credentials


def _get_json(client: httpx.Client, url: str, **params: Any) -> Any | None:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        response = client.get(url, params=params or None)
        if response.status_code == 200:
            return response.json()
    return None


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                listening = len(fields) > 9 and fields[3] == "0A"  # 0A = LISTEN
                if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def find_listening_process(port: int) -> int | None:
    """PID of the local process listening on ``port`` (Linux /proc; None if not visible)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if fd.readlink().as_posix() in targets:
                        return int(proc.name)
    return None


def read_cmdline(pid: int) -> list[str] | None:
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    return None


def speculative_config_from_argv(argv: list[str]) -> dict[str, Any] | None:
    """The ``--speculative-config`` JSON of a vLLM command line, or SGLang's flags as a dict."""
    config: dict[str, Any] = {}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        if flag == "--speculative-config":
            with contextlib.suppress(json.JSONDecodeError):
                parsed = json.loads(value)
                if isinstance(parsed, dict):
                    return parsed
        elif flag.startswith("--speculative-"):
            config[flag[2:].replace("-", "_")] = value
    if "speculative_algorithm" in config:
        config["method"] = str(config["speculative_algorithm"]).lower()
    return config or None


def probe_server(
    endpoint: Endpoint | str,
    *,
    timeout_s: float = 10.0,
    transport: httpx.BaseTransport | None = None,
    api_key_env: str | None = None,
) -> ServerIdentity:
    """Ask a running server what it is; raise SpeclabError when it does not answer at all,
    or refuses for want of the API key named by ``api_key_env`` (sent with every probe)."""
    ep = endpoint if isinstance(endpoint, Endpoint) else Endpoint.parse(endpoint)
    identity = ServerIdentity(endpoint=ep.public)
    headers = auth_headers(api_key_env) or basic_auth_headers(ep)
    ep = ep.without_credentials()
    with httpx.Client(timeout=httpx.Timeout(timeout_s), transport=transport, headers=headers) as client:
        try:
            health = client.get(ep.at_root("health"))
        except httpx.HTTPError as exc:
            raise SpeclabError(
                f"The server at {ep.public} does not answer ({type(exc).__name__}); check the "
                "endpoint and that the server is up."
            ) from None
        if health.status_code in (401, 403):
            raise auth_refused(health.status_code, f"The server at {ep.public}", api_key_env)
        with contextlib.suppress(httpx.HTTPError):
            listed = client.get(ep.api("models"))
            if listed.status_code in (401, 403):
                raise auth_refused(listed.status_code, f"The server at {ep.public}", api_key_env)
        models = _get_json(client, ep.api("models"))
        if isinstance(models, dict):
            for card in models.get("data") or []:
                identity.models.append(
                    ModelCard(id=str(card.get("id")), root=card.get("root"),
                              max_model_len=card.get("max_model_len"))
                )
        if not identity.models:
            raise SpeclabError(
                f"{strip_credentials(ep.api('models'))} lists no model; is {ep.public} an OpenAI-compatible server?"
            )
        version = _get_json(client, ep.at_root("version"))
        if isinstance(version, dict):
            identity.version = version.get("version")
        _probe_metrics(client, ep, identity)
        _probe_vllm_server_info(client, ep, identity)
        _probe_sglang(client, ep, identity)
    if transport is None and is_local_host(ep.host):
        pid = find_listening_process(ep.port)
        if pid:
            identity.pid = pid
            identity.cmdline = redact_argv(read_cmdline(pid) or []) or None
            if identity.cmdline and identity.speculative_config is None:
                identity.speculative_config = speculative_config_from_argv(identity.cmdline)
            if identity.cmdline and identity.engine == "unknown":
                line = " ".join(identity.cmdline)
                identity.engine = "sglang" if "sglang" in line else "vllm" if "vllm" in line else "unknown"
    _infer_method(identity)
    return identity


def _probe_metrics(client: httpx.Client, ep: Endpoint, identity: ServerIdentity) -> None:
    with contextlib.suppress(httpx.HTTPError):
        response = client.get(ep.at_root("metrics"))
        if response.status_code != 200:
            identity.notes.append(f"/metrics answered {response.status_code}: no server counters")
            return
        try:
            snapshot = parse_metrics(response.text)
        except SpeclabError:
            identity.notes.append("/metrics is not Prometheus text: no server counters")
            return
        identity.metric_families = sorted(snapshot.families)
        info = spec_decode_info(snapshot)
        identity.spec_counters_present = info.enabled
        identity.spec_positions = info.num_positions
        if info.engine:
            identity.engine = info.engine


def _probe_vllm_server_info(client: httpx.Client, ep: Endpoint, identity: ServerIdentity) -> None:
    info = _get_json(client, ep.at_root("server_info"), config_format="json")
    if not isinstance(info, dict) or "vllm_config" not in info:
        return
    identity.server_info_available = True
    identity.engine = "vllm"
    config = info["vllm_config"]
    if isinstance(config, dict):
        spec = config.get("speculative_config")
        if isinstance(spec, dict):
            keep = ("method", "model", "num_speculative_tokens", "prompt_lookup_min",
                    "prompt_lookup_max", "draft_tensor_parallel_size", "num_speculative_tokens_per_batch_size")
            identity.speculative_config = {k: spec[k] for k in keep if spec.get(k) is not None}
        dtype = (config.get("model_config") or {}).get("dtype")
        if dtype:
            identity.dtype = str(dtype).replace("torch.", "")


def _probe_sglang(client: httpx.Client, ep: Endpoint, identity: ServerIdentity) -> None:
    if identity.engine == "vllm":
        return
    info = _get_json(client, ep.at_root("get_server_info"))
    if not isinstance(info, dict):
        return
    identity.engine = "sglang"
    keep = ("version", "model_path", "tp_size", "dtype", "speculative_algorithm",
            "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
            "speculative_draft_model_path", "context_length")
    identity.sglang_server_info = {k: info[k] for k in keep if k in info}
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        accept = states[0].get("avg_spec_accept_length")
        if accept is not None:
            identity.sglang_server_info["avg_spec_accept_length"] = accept
    identity.version = identity.version or info.get("version")
    identity.dtype = identity.dtype or info.get("dtype")
    algorithm = info.get("speculative_algorithm")
    if algorithm:
        identity.speculative_config = {
            "method": str(algorithm).lower(),
            "num_speculative_tokens": info.get("speculative_num_steps"),
            "model": info.get("speculative_draft_model_path"),
        }


def _infer_method(identity: ServerIdentity) -> None:
    method = (identity.speculative_config or {}).get("method")
    if method:
        identity.observed_method = str(method).lower()
    elif identity.spec_counters_present:
        identity.observed_method = "speculative"
    elif identity.engine == "vllm" and identity.metric_families:
        # vLLM registers spec-decode counters only when speculation is configured.
        identity.observed_method = "baseline"
    elif identity.engine == "sglang" and identity.sglang_server_info is not None:
        identity.observed_method = "baseline"


def contradictions(identity: ServerIdentity, declared: SpecOption) -> list[str]:
    """Sentences saying where the server contradicts the option the user declared."""
    problems: list[str] = []
    observed = identity.observed_method
    if observed is None:
        return [
            f"Could not tell whether {identity.endpoint} runs speculation (no /metrics, "
            "/server_info or local process); the declared option is unverified."
        ]
    on = observed != "baseline"
    if declared.method == "baseline" and on:
        problems.append(
            f"You declared baseline, but {identity.endpoint} runs speculative decoding "
            f"({observed}); restart it without speculation or declare the option it runs."
        )
    elif declared.method != "baseline" and not on:
        problems.append(
            f"You declared {declared.method}, but {identity.endpoint} shows no speculative "
            "decoding (no spec-decode counters or config): speculation is NOT on."
        )
    elif on and observed not in ("speculative", declared.method):
        problems.append(
            f"You declared {declared.method}, but {identity.endpoint} runs {observed}."
        )
    k = declared.num_speculative_tokens
    positions = identity.spec_positions
    config_k = (identity.speculative_config or {}).get("num_speculative_tokens")
    if on and k and positions and positions != k:
        problems.append(
            f"You declared k={k}, but the server's counters have {positions} positions (k={positions})."
        )
    elif on and k and config_k and int(config_k) != k:
        problems.append(f"You declared k={k}, but the server is configured with k={config_k}.")
    return problems
