"""Capture a profiler trace from a live server under a steady decode load.

The load runs through the measurement core (:func:`speclab.measure.loadgen.measure_sweep`) on a
background thread; once it has settled, ``POST /start_profile`` opens a bounded window and
``POST /stop_profile`` closes it (vLLM writes the trace while stop blocks: ~26 s for a
5 MB CPU trace, far longer for 8 GPU ranks). Every trace file the server wrote in the
window is copied into ``<run>/traces/``. Facts: docs/measurement.md section 5, docs/embedded-server.md.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import shutil
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from speclab.errors import SpeclabError
from speclab.options import Engine
from speclab.runfolder import CAPTURE_JSON
from speclab.runs import Run, write_json

TRACES_DIR = "traces"
# vLLM: <name>.<ns>.pt.trace.json.gz (per rank, plus <host>_<pid>.async_llm.* for the
# API server); SGLang: <profile_id>-TP-<rank>[-stage].trace.json.gz; plain .json too.
TRACE_SUFFIXES = (".trace.json.gz", ".trace.json", ".pt.trace.json.gz", ".pt.trace.json")
SIDE_FILE_PATTERN = re.compile(r"profiler_out.*\.txt$")


@dataclass
class CaptureResult:
    """What one capture produced: the copied traces and how the window went."""

    run_dir: Path
    traces: list[Path]
    side_files: list[Path] = field(default_factory=list)
    engine: str = "vllm"
    window_s: float = 0.0
    stop_s: float = 0.0
    load_running_at_stop: bool = True
    started_utc: str = ""
    stopped_utc: str = ""
    source_dir: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "traces": [str(p) for p in self.traces],
            "side_files": [str(p) for p in self.side_files],
            "engine": self.engine,
            "window_s": self.window_s,
            "stop_s": self.stop_s,
            "load_running_at_stop": self.load_running_at_stop,
            "started_utc": self.started_utc,
            "stopped_utc": self.stopped_utc,
            "source_dir": self.source_dir,
            "notes": self.notes,
        }


def is_trace_file(path: Path) -> bool:
    """A Chrome trace written by torch.profiler (gzip or plain)."""
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def _snapshot(folder: Path) -> dict[Path, tuple[int, float]]:
    if not folder.exists():
        return {}
    found: dict[Path, tuple[int, float]] = {}
    for path in folder.rglob("*"):
        if path.is_file():
            stat = path.stat()
            found[path] = (stat.st_size, stat.st_mtime)
    return found


def _new_files(folder: Path, before: dict[Path, tuple[int, float]]) -> list[Path]:
    after = _snapshot(folder)
    return sorted(p for p, sig in after.items() if before.get(p) != sig)


def wait_for_traces(
    folder: Path,
    before: dict[Path, tuple[int, float]],
    *,
    timeout_s: float = 120.0,
    settle_s: float = 2.0,
    expect: int = 1,
) -> list[Path]:
    """New trace files under ``folder`` once at least ``expect`` exist and none grew for ``settle_s``."""
    deadline = time.monotonic() + timeout_s
    last: dict[Path, int] = {}
    stable_since = time.monotonic()
    while True:
        traces = [p for p in _new_files(folder, before) if is_trace_file(p)]
        sizes = {p: p.stat().st_size for p in traces}
        if sizes != last:
            last = sizes
            stable_since = time.monotonic()
        elif len(traces) >= expect and time.monotonic() - stable_since >= settle_s:
            return traces
        if time.monotonic() > deadline:
            return traces
        time.sleep(0.25)


def collect_traces(
    source: str | Path | Iterable[str | Path],
    run_dir: str | Path,
    *,
    since: dict[Path, tuple[int, float]] | None = None,
    move: bool = False,
) -> tuple[list[Path], list[Path]]:
    """Copy trace files (and vLLM's ``profiler_out`` text) into ``<run_dir>/traces/``.

    ``source`` is a folder (every trace in it, or only those new or changed since the
    ``since`` snapshot) or a list of files: for an external server, the folder where its
    traces landed, as seen from this machine (a mount, or where you copied them).
    Returns (traces, side files) at their new paths.
    """
    dest = Path(run_dir) / TRACES_DIR
    dest.mkdir(parents=True, exist_ok=True)
    if isinstance(source, (str, Path)):
        folder = Path(source)
        if not folder.exists():
            raise SpeclabError(f"The trace folder {folder} does not exist; give the folder the server writes to.")
        files = _new_files(folder, since) if since is not None else sorted(p for p in folder.rglob("*") if p.is_file())
    else:
        files = [Path(p) for p in source]
    traces: list[Path] = []
    sides: list[Path] = []
    for path in files:
        if not (is_trace_file(path) or SIDE_FILE_PATTERN.search(path.name)):
            continue
        target = dest / path.name
        if target.resolve() == path.resolve():
            copied = target
        elif move:
            copied = Path(shutil.move(str(path), target))
        else:
            copied = Path(shutil.copy2(path, target))
        (traces if is_trace_file(copied) else sides).append(copied)
    return traces, sides


def _utc() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _engine_of(live: Any, engine: str | None) -> str:
    if engine:
        return engine
    managed = getattr(live, "managed", None)
    if managed is not None and getattr(managed, "launch", None) is not None:
        return managed.launch.engine
    identity = getattr(live, "identity", None)
    found = getattr(identity, "engine", "unknown")
    return found if found in ("vllm", "sglang") else "vllm"


def _trace_dir_of(live: Any, trace_dir: str | Path | None) -> Path:
    if trace_dir is not None:
        return Path(trace_dir)
    managed = getattr(live, "managed", None)
    launch = getattr(managed, "launch", None)
    if launch is not None and launch.profiler_dir:
        return Path(launch.profiler_dir)
    raise SpeclabError(
        "No trace folder is known for this server; start it with profiler_dir set, or give "
        "trace_dir: the folder its profiler writes to, as seen from this machine."
    )


def _post(client: httpx.Client, url: str, what: str, api_key_env: str | None = None,
          **kwargs: Any) -> httpx.Response:
    try:
        response = client.post(url, **kwargs)
    except httpx.TimeoutException:
        raise SpeclabError(
            f"{what} did not answer in time ({url}); the server may still be writing the trace: "
            "raise stop_timeout_s or look in its trace folder."
        ) from None
    except httpx.HTTPError as exc:
        raise SpeclabError(f"{what} failed ({url}): {exc}; is the server up?") from None
    if response.status_code in (401, 403):
        from speclab.auth import auth_refused

        raise auth_refused(response.status_code, url, api_key_env)
    if response.status_code == 404:
        raise SpeclabError(
            f"{url} answered 404: the server runs without a profiler; start vLLM with "
            "--profiler-config (SGLang: SGLANG_TORCH_PROFILER_DIR) and try again."
        )
    if response.status_code >= 400:
        raise SpeclabError(f"{what} answered HTTP {response.status_code}: {response.text[:300]}")
    return response


def capture_profile(
    live: Any,
    run: Run | str | Path,
    *,
    window_s: float = 4.0,
    concurrency: int = 4,
    max_tokens: int = 384,
    warmup_s: float = 3.0,
    rounds: int = 2,
    categories: list[str] | None = None,
    trace_dir: str | Path | None = None,
    engine: Engine | None = None,
    sglang_num_steps: int | None = None,
    sglang_output_dir: str | None = None,
    stop_timeout_s: float = 600.0,
    collect_timeout_s: float = 120.0,
    expect_traces: int = 1,
    ignore_eos: bool = True,
) -> CaptureResult:
    """Profile ``window_s`` seconds of steady decode at ``concurrency`` and collect the traces.

    The load (``rounds`` x ``concurrency`` requests of ``max_tokens`` tokens, EOS ignored so
    outputs stay long) runs through :func:`~speclab.measure.loadgen.measure_sweep` with arm
    ``profile``; its records land in the run folder as usual. The profile window opens
    ``warmup_s`` after the load starts, so choose ``max_tokens`` such that one request
    outlasts ``warmup_s + window_s``. ``trace_dir`` is where the server writes traces as
    seen from here (defaults to the managed server's ``profiler_dir``); for SGLang,
    ``sglang_num_steps`` asks the server to stop by itself after that many forward steps.
    Writes ``profile_capture.json`` and returns the copied traces.
    """
    from speclab.measure.loadgen import SweepConfig, measure_sweep, plan_sweep
    from speclab.runfolder import Plan

    if isinstance(run, (str, Path)):
        folder = Path(run)
        run = Run.open(folder) if (folder / "manifest.json").exists() else Run.create(
            "profile", kind="profile", run_dir=folder)
    if window_s <= 0 or concurrency < 1 or rounds < 1:
        raise SpeclabError("capture_profile needs window_s > 0, concurrency >= 1 and rounds >= 1.")
    engine_name = _engine_of(live, engine)
    source = _trace_dir_of(live, trace_dir)
    result = CaptureResult(run_dir=run.path, traces=[], engine=engine_name, source_dir=str(source))

    from speclab.prompts import load_builtin

    pool_categories = sorted({p.category for p in load_builtin(categories)})
    per_category = max(1, math.ceil(concurrency * rounds / max(len(pool_categories), 1)))
    config = SweepConfig(
        concurrency=[concurrency], per_category=per_category, max_tokens=max_tokens,
        categories=categories, warmup_requests=0, ignore_eos=ignore_eos, reuse_prompts=True,
        api_key_env=getattr(live, "api_key_env", None),
    )
    # Exactly rounds x concurrency requests: a per-category plan rounds up to whole
    # categories (14 where 8 were asked at c=4), and every request past the window only
    # lengthens the run (by ~30 s on the embedded server).
    full = plan_sweep(config)
    kept = full.requests[:concurrency * rounds]
    plan = Plan(kept, {r.prompt_id: full.prompts[r.prompt_id] for r in kept}, full.reused_prompts, full.notes)
    load_error: list[BaseException] = []

    def drive() -> None:
        try:
            measure_sweep(live.endpoint, live.model, config, run, plan=plan, arm="profile", progress=False)
        except BaseException as exc:  # noqa: BLE001 - reported after the window
            load_error.append(exc)

    before = _snapshot(source)
    load = threading.Thread(target=drive, name="speclab-profile-load", daemon=True)
    from speclab.auth import auth_headers, basic_auth_headers

    # /start_profile and /stop_profile sit behind the same --api-key as the rest
    api_key_env = getattr(live, "api_key_env", None)
    headers = auth_headers(api_key_env) or basic_auth_headers(live.endpoint)
    client = httpx.Client(timeout=httpx.Timeout(30.0, read=stop_timeout_s), headers=headers)
    try:
        load.start()
        time.sleep(warmup_s)
        if load_error:
            raise SpeclabError(f"The load failed before the profile window: {load_error[0]}")
        start_url = live.endpoint.without_credentials().at_root("start_profile")
        stop_url = live.endpoint.without_credentials().at_root("stop_profile")
        body: dict[str, Any] | None = None
        if engine_name == "sglang":
            body = {"activities": ["CPU", "GPU"]}
            if sglang_num_steps:
                body["num_steps"] = sglang_num_steps
            if sglang_output_dir:
                body["output_dir"] = sglang_output_dir
        result.started_utc = _utc()
        opened = time.perf_counter()
        _post(client, start_url, "POST /start_profile", api_key_env, json=body)
        if engine_name == "sglang" and sglang_num_steps:
            # SGLang stops by itself after num_steps (newer builds answer only then).
            result.window_s = time.perf_counter() - opened
        else:
            time.sleep(max(0.0, window_s - (time.perf_counter() - opened)))
            result.window_s = time.perf_counter() - opened
            result.load_running_at_stop = load.is_alive()
            closing = time.perf_counter()
            _post(client, stop_url, "POST /stop_profile", api_key_env)
            result.stop_s = time.perf_counter() - closing
        result.stopped_utc = _utc()
        if not result.load_running_at_stop:
            result.notes.append(
                "the load ended before the window closed: raise max_tokens or rounds so that "
                "the whole window is under load")
        new = wait_for_traces(source, before, timeout_s=collect_timeout_s, expect=expect_traces)
        if not new:
            raise SpeclabError(
                f"No new trace appeared in {source} within {collect_timeout_s:.0f} s after "
                "/stop_profile; check the server log and that trace_dir is the profiler's folder."
            )
        # let vLLM's profiler_out text land too; it is written right after the trace
        time.sleep(0.5)
        result.traces, result.side_files = collect_traces(source, run.path, since=before)
    finally:
        client.close()
        load.join(timeout=stop_timeout_s)
    if load_error:
        result.notes.append(f"the load reported an error: {load_error[0]}")
    write_json(run.path / CAPTURE_JSON, result.to_json())
    return result
