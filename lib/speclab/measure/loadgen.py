"""The load generator: concurrency or Poisson sweeps, records appended as they arrive.

A sweep is planned first (which prompt goes to which level and repeat), the plan and the
prompts are saved in the run folder, and a later arm (02-ngram) replays exactly that plan
for a paired comparison. Per level: warm-up requests (excluded), a ``/metrics`` scrape,
the measured requests, a second scrape; the counter deltas give acceptance and the
server's own latency means for the same window.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import multiprocessing
import os
import queue as queue_module
import random
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from speclab.auth import auth_headers, basic_auth_headers
from speclab.errors import SpeclabError
from speclab.measure import hostload
from speclab.measure.client import IDLE_TIMEOUT_S, LoopLagMonitor, RequestSpec, Sampling, StreamClient
from speclab.measure.metrics import MetricsSnapshot, foreign_traffic, scrape_metrics, window
from speclab.measure.summary import summarise_level
from speclab.outcome import RunOutcome, assess_levels
from speclab.prompts import Prompt, PromptReuseWarning, distinct_batches, load_prompts, select_prompts
from speclab.runfolder import (
    LEVELS_JSONL,
    REQUESTS_JSONL,
    SUMMARY_JSON,
    Plan,
    PlannedRequest,
    RequestRecord,
    write_parquet,
)
from speclab.runs import Run, check_run_dir, write_json
from speclab.sweep import SweepConfig
from speclab.urls import Endpoint

WARMUP_MESSAGES = [{"role": "user", "content": "Say hello in five words."}]


def plan_sweep(config: SweepConfig, prompts: list[Prompt] | None = None) -> Plan:
    """Assign prompts to levels and repeats: distinct prompts per level unless reuse is asked.

    A level at concurrency c gets ``per_category`` prompts of each category, or in closed
    loop enough more (drawn in order, categories kept even) for ``rounds`` waves of c
    (:meth:`SweepConfig.level_requests`): both arms of a comparison run this same plan.
    """
    pool = prompts if prompts is not None else load_prompts(config.prompts, config.categories)
    pool = select_prompts(pool, config.categories)
    categories = len({p.category for p in pool})
    slots = [(c, r) for c in config.concurrency for r in range(config.repeats)]
    per_slot = [-(-config.level_requests(c, categories) // categories) for c, _ in slots]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if config.reuse_prompts:
            batch = select_prompts(pool, config.categories, config.per_category)
            batches = [_cycled(batch, k * categories) for k in per_slot]
        else:
            batches = distinct_batches(pool, len(slots), per_slot)
    reused = config.reuse_prompts or any(issubclass(w.category, PromptReuseWarning) for w in caught)
    # The warnings were caught to set the flag; they become notes the runner prints and
    # stores, because a swallowed warning is one nobody reads.
    notes = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    requests: list[PlannedRequest] = []
    for level, ((concurrency, repeat), batch) in enumerate(zip(slots, batches, strict=True)):
        # Interleave categories so every level sees every category from its first second.
        for prompt in _interleave(batch):
            requests.append(PlannedRequest(
                level=level, concurrency=concurrency, rate=config.rate, repeat=repeat,
                prompt_id=prompt.id, category=prompt.category,
                max_tokens=config.max_tokens or prompt.max_tokens,
            ))
    used = {r.prompt_id for r in requests}
    notes.extend(_repeats_within_levels(requests))
    return Plan(requests, {p.id: p for p in pool if p.id in used}, reused, notes)


def _cycled(batch: list[Prompt], n: int) -> list[Prompt]:
    """``batch`` repeated in order to at least ``n`` prompts (whole copies of the batch)."""
    copies = max(1, -(-n // max(len(batch), 1)))
    return [p for _ in range(copies) for p in batch]


def _repeats_within_levels(requests: list[PlannedRequest]) -> list[str]:
    counts: dict[tuple[int, str], int] = {}
    for r in requests:
        counts[(r.level, r.prompt_id)] = counts.get((r.level, r.prompt_id), 0) + 1
    repeated = sorted({prompt for (_, prompt), n in counts.items() if n > 1})
    if not repeated:
        return []
    most = max(counts.values())
    return [f"{len(repeated)} prompt(s) run up to {most} times within one level (e.g. {repeated[0]!r}): "
            "the prompt set holds fewer prompts than a level's requests (per_category of each category, "
            "or rounds x concurrency), so later copies may hit the prefix cache; give more prompts, "
            "or lower per_category or rounds."]


def check_open_files(concurrency: int, workers: int = 1) -> None:
    """Raise one sentence when the open-file limit cannot hold ``concurrency`` streams
    (one socket each, plus headroom for files, pipes and control connections); raises the
    soft limit up to the hard one first, as servers commonly do."""
    try:
        import resource
    except ImportError:  # not POSIX: nothing to check
        return
    per_process = -(-concurrency // max(workers, 1))
    needed = per_process + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < needed:
        raise SpeclabError(
            f"Concurrency {concurrency} needs about {needed} open files per client process but the limit "
            f"is {soft}; raise it (ulimit -n {needed}) or spread the streams with more workers.")


def check_before_sweep(config: SweepConfig, plan: Plan | None = None,
                       run_dir: str | Path | None = None) -> Plan:
    """Everything checkable without a server, checked before one is started or probed:
    the API key variable, the run folder, the open-file limit and the plan (prompt file,
    categories, counts). Returns the plan; raises SpeclabError with one sentence."""
    auth_headers(config.api_key_env)
    if run_dir is not None:
        check_run_dir(run_dir)
    check_open_files(max(config.concurrency), config.workers)
    if plan is None:
        plan = plan_sweep(config)
        for note in plan.notes:
            print(f"speclab: warning: {note}", file=sys.stderr)
    return plan


def _interleave(batch: list[Prompt]) -> list[Prompt]:
    by_cat: dict[str, list[Prompt]] = {}
    for prompt in batch:
        by_cat.setdefault(prompt.category, []).append(prompt)
    out: list[Prompt] = []
    while any(by_cat.values()):
        for items in by_cat.values():
            if items:
                out.append(items.pop(0))
    return out


def _spec_for(planned: PlannedRequest, prompt: Prompt, arm: str, copy: int = 0) -> RequestSpec:
    # ``copy`` numbers repeats of a prompt within a level, so that request ids stay unique
    # and both arms of a comparison pair copy n with copy n.
    return RequestSpec(
        request_id=f"{arm}-L{planned.level}-{planned.prompt_id}" + (f"-copy{copy}" if copy else ""),
        prompt_id=planned.prompt_id,
        category=planned.category,
        messages=[dict(m) for m in prompt.messages] if prompt.messages else None,
        prompt=prompt.prompt,
        max_tokens=planned.max_tokens,
        tags={"level": planned.level, "concurrency": planned.concurrency,
              "rate": planned.rate, "repeat": planned.repeat},
    )


# With level_duration_s a level keeps its slots full by sending its planned requests again, in
# order (copy numbers continue, so both arms pair copy n with copy n), until the time is up.
DURATION_CYCLES = 50


def _level_specs(plan: Plan, level: int, arm: str, cycles: int = 1) -> list[RequestSpec]:
    """The level's requests in send order, ``cycles`` times over; repeats of a prompt are
    numbered copies (``-copyN``) in plan order."""
    copies: dict[str, int] = {}
    specs = []
    for _ in range(cycles):
        for p in plan.for_level(level):
            specs.append(_spec_for(p, plan.prompts[p.prompt_id], arm, copies.get(p.prompt_id, 0)))
            copies[p.prompt_id] = copies.get(p.prompt_id, 0) + 1
    return specs


# --------------------------------------------------------------------------- one level


async def _drive(
    client: StreamClient,
    specs: list[RequestSpec],
    concurrency: int,
    rate: float | None,
    t0: float,
    on_record: Callable[[RequestRecord], None],
    stop: threading.Event,
    seed: int,
    deadline_s: float | None = None,
) -> None:
    """Closed loop (``concurrency`` in flight) or Poisson arrivals capped at ``concurrency``;
    with ``deadline_s`` (seconds on the run clock ``t0``) nothing is sent after it."""
    slots = asyncio.Semaphore(concurrency)

    async def one(spec: RequestSpec) -> None:
        try:
            record = await client.send(spec, t0)
            on_record(record)
        finally:
            slots.release()

    tasks: list[asyncio.Task[None]] = []
    rng = random.Random(seed)
    next_arrival = time.perf_counter()
    for spec in specs:
        if stop.is_set():
            break
        if deadline_s is not None and time.perf_counter() - t0 >= deadline_s:
            break
        if rate is not None:
            next_arrival += rng.expovariate(rate)
            delay = next_arrival - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        await slots.acquire()
        if deadline_s is not None and time.perf_counter() - t0 >= deadline_s:
            slots.release()  # the slot freed after the deadline: the level drains
            break
        tasks.append(asyncio.create_task(one(spec)))
    if tasks:
        await asyncio.gather(*tasks)


async def _level_in_process(
    endpoint: Endpoint,
    model: str,
    config: SweepConfig,
    specs: list[RequestSpec],
    concurrency: int,
    rate: float | None,
    t0: float,
    on_record: Callable[[RequestRecord], None],
    stop: threading.Event,
    seed: int,
    deadline_s: float | None = None,
) -> dict[str, Any]:
    lag = LoopLagMonitor()
    async with StreamClient(
        endpoint, model,
        transport=config.transport,
        sampling=Sampling(
            temperature=config.temperature, seed=config.seed, max_tokens=config.max_tokens or 256,
            ignore_eos=config.ignore_eos, chat_template_kwargs=config.chat_template_kwargs(),
        ),
        max_connections=max(concurrency * 2, 8),
        read_timeout_s=config.idle_timeout_s or IDLE_TIMEOUT_S,
        idle_timeout_s=config.idle_timeout_s,
        request_deadline_s=config.request_timeout_s,
        api_key_env=config.api_key_env,
    ) as client:
        lag.start()
        await _drive(client, specs, concurrency, rate, t0, on_record, stop, seed, deadline_s)
        summary = await lag.stop()
        result: dict[str, Any] = {**summary, "capabilities": dict(client.capabilities)}
    return result


def run_coroutine(coro_factory: Callable[[], Any]) -> Any:
    """Run a coroutine on a fresh uvloop (or asyncio) loop; works inside Jupyter too."""

    def runner() -> Any:
        loop_factory = None
        with contextlib.suppress(ImportError):
            import uvloop

            loop_factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=loop_factory) as loop_runner:
            return loop_runner.run(coro_factory())

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return runner()
    # A loop already runs here (Jupyter): measure on a thread with its own loop.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(runner).result()


def _die_with_parent(parent_pid: int) -> None:
    """A worker must never outlive the sweep that started it and keep loading the server:
    ask Linux to SIGKILL it when its parent dies, and watch the parent as a fallback."""
    import ctypes
    import os
    import signal

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    # SIGTERM/SIGINT of a worker alone: stop at once, like the parent would.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(1))


def _worker_main(args: tuple[Any, ...]) -> None:
    """A client process: runs its share of a level and streams records back on a queue."""
    endpoint_root, model, config_json, spec_dicts, concurrency, rate, t0, queue, seed, parent, deadline_s = args
    _die_with_parent(parent)
    config = SweepConfig.model_validate_json(config_json)
    specs = [RequestSpec(**d) for d in spec_dicts]
    stop = threading.Event()

    def send_back(record: RequestRecord) -> None:
        queue.put(("record", record.to_row()))

    async def go() -> dict[str, Any]:
        return await _level_in_process(
            Endpoint.parse(endpoint_root), model, config, specs, concurrency, rate, t0,
            send_back, stop, seed, deadline_s)

    try:
        queue.put(("lag", run_coroutine(go)))
    except BaseException as exc:  # noqa: BLE001 - report, never hang the parent
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def _record_from_row(row: dict[str, Any]) -> RequestRecord:
    row = dict(row)
    row.pop("ok", None)
    return RequestRecord(**row)


def _level_in_workers(
    endpoint: Endpoint, model: str, config: SweepConfig, specs: list[RequestSpec],
    concurrency: int, rate: float | None, t0: float,
    on_record: Callable[[RequestRecord], None], stop: threading.Event, seed: int,
    deadline_s: float | None = None,
) -> dict[str, Any]:
    """Spread a level's streams over ``config.workers`` processes (perf_counter is
    CLOCK_MONOTONIC on Linux, so every process shares the run clock ``t0``)."""
    n = min(config.workers, concurrency, max(len(specs), 1))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    shares = [specs[i::n] for i in range(n)]
    per_worker = [concurrency // n + (1 if i < concurrency % n else 0) for i in range(n)]
    worker_rate = rate / n if rate else None
    processes = []
    for i in range(n):
        args = (endpoint.root, model, config.model_dump_json(), [s.__dict__ for s in shares[i]],
                per_worker[i], worker_rate, t0, queue, seed + i, os.getpid(), deadline_s)
        process = context.Process(target=_worker_main, args=(args,), daemon=True)
        process.start()
        processes.append(process)
    lags: list[dict[str, Any]] = []
    errors: list[str] = []
    finished = 0
    completed = False
    try:
        while finished < n:
            try:
                kind, payload = queue.get(timeout=1.0)
            except queue_module.Empty:
                # A worker killed from outside sends nothing more: do not wait for it forever.
                if not any(p.is_alive() for p in processes) and queue.empty():
                    errors.append(f"a client worker died (exit codes {[p.exitcode for p in processes]})")
                    break
                continue
            if kind == "record":
                on_record(_record_from_row(payload))
            elif kind == "lag":
                lags.append(payload)
                finished += 1
            else:
                errors.append(payload)
                finished += 1
        completed = True
    finally:
        for process in processes:
            if not completed:  # Ctrl-C, SIGTERM or an error here: stop sending at once
                process.terminate()
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
    if errors:
        raise SpeclabError(f"A client worker failed: {errors[0]}; rerun with workers: 1 to see it.")
    keys = ("lag_p50_s", "lag_p99_s", "lag_max_s")
    merged: dict[str, Any] = {k: max((lag.get(k) or 0.0) for lag in lags) for k in keys}
    merged["workers"] = n
    merged["capabilities"] = lags[0].get("capabilities") if lags else None
    return merged


# --------------------------------------------------------------------------- the sweep


@dataclass
class SweepResult:
    run_dir: Path
    levels: list[dict[str, Any]] = field(default_factory=list)
    records: list[RequestRecord] = field(default_factory=list)
    outcome: RunOutcome | None = None

    @property
    def status(self) -> str:
        """ok, degraded or failed (see :mod:`speclab.outcome`)."""
        return self.outcome.status if self.outcome is not None else "ok"


class _Appender:
    """Appends each record to requests.jsonl the moment it arrives (flushed, not fsynced: a power cut can lose the last lines)."""

    def __init__(self, path: Path, extra: dict[str, Any], progress: Any) -> None:
        self.handle = open(path, "ab")  # noqa: SIM115 - closed in close()
        self.extra = extra
        self.records: list[RequestRecord] = []
        self.progress = progress
        self.lock = threading.Lock()

    def __call__(self, record: RequestRecord) -> None:
        row = {**self.extra, **record.to_row()}
        with self.lock:
            self.handle.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            self.handle.flush()
            self.records.append(record)
            if self.progress is not None:
                self.progress.update(1)

    def close(self) -> None:
        self.handle.close()


def _progress_bar(total: int | None, description: str, enabled: bool) -> Any:
    # `enabled` is about this process's own output; a headless notebook's bars still reach the
    # terminal of `speclab run`/`demo` (speclab.measure.progress)
    from speclab.measure import progress as bars

    return bars.bar(total=total, desc=description, unit="req", show=enabled)


def _scrape(client: httpx.Client, endpoint: Endpoint, failures: list[str]) -> MetricsSnapshot | None:
    """A ``/metrics`` snapshot, or None with the reason appended to ``failures`` (the level is
    then measured without counters, and says so)."""
    try:
        return scrape_metrics(client, endpoint)
    except SpeclabError as exc:
        failures.append(exc.message)
        return None


def _reset_prefix_cache(client: httpx.Client, endpoint: Endpoint) -> str:
    """POST ``/reset_prefix_cache``: 'reset', or why not (vLLM serves it only in dev mode, and
    a production server refuses it: levels may then reuse prompts cached by earlier ones)."""
    try:
        response = client.post(endpoint.at_root("reset_prefix_cache"))
    except httpx.HTTPError as exc:
        return f"failed ({type(exc).__name__})"
    if response.is_success:
        return "reset"
    return f"refused (HTTP {response.status_code})"


def _warm_up(endpoint: Endpoint, model: str, config: SweepConfig, n: int, arm: str) -> None:
    if n <= 0:
        return
    specs = [RequestSpec(request_id=f"{arm}-warmup-{i}", prompt_id="warmup", category="warmup",
                         messages=WARMUP_MESSAGES, max_tokens=16) for i in range(n)]

    async def go() -> dict[str, Any]:
        return await _level_in_process(endpoint, model, config, specs, n, None, time.perf_counter(),
                                       lambda r: None, threading.Event(), 0)

    run_coroutine(go)


def measure_sweep(
    endpoint: Endpoint | str,
    model: str,
    config: SweepConfig,
    run: Run,
    *,
    plan: Plan | None = None,
    arm: str = "baseline",
    progress: bool = True,
) -> SweepResult:
    """Run every level of the plan against the server and write the run's data files.

    Writes ``plan.json`` + ``prompts.jsonl`` first, appends ``requests.jsonl`` per request
    and ``levels.jsonl`` per level, rewrites ``summary.json`` after each level, and writes
    ``requests.parquet`` at the end. Ctrl-C stops sending; what was measured stays.
    """
    ep = endpoint if isinstance(endpoint, Endpoint) else Endpoint.parse(endpoint)
    plan = plan or plan_sweep(config)
    plan.save(run.path)
    run.update(sweep=config.sweep_only().model_dump(mode="json"))
    if plan.notes:  # printed by check_before_sweep; kept with the run for the report
        run.update(warnings=list(plan.notes))
    result = SweepResult(run.path)
    stop = threading.Event()
    # Scrapes and cache resets carry the key too: some deployments protect /metrics.
    control = httpx.Client(timeout=httpx.Timeout(30.0),
                           headers=auth_headers(config.api_key_env) or basic_auth_headers(ep))
    ep = ep.without_credentials()
    try:
        for level, concurrency, rate, repeat in plan.levels():
            timed = config.level_duration_s if rate is None else None
            specs = _level_specs(plan, level, arm, cycles=DURATION_CYCLES if timed else 1)
            cache_reset = _reset_prefix_cache(control, ep) if config.reset_prefix_cache else "off"
            probe_ms = hostload.speed_probe_ms()  # the server is idle between levels
            _warm_up(ep, model, config, config.warmup_requests, arm)
            scrape_failures: list[str] = []
            before = _scrape(control, ep, scrape_failures)
            load_before = hostload.sample()
            label = f"{arm} c={concurrency}" + (f" rate={rate}/s" if rate else "") + (
                f" repeat {repeat + 1}" if config.repeats > 1 else "")
            bar = _progress_bar(None if timed else len(specs), label, progress)
            appender = _Appender(
                run.path / REQUESTS_JSONL,
                {"arm": arm, "level": level, "concurrency": concurrency, "rate": rate, "repeat": repeat},
                bar,
            )
            t0 = time.perf_counter()
            try:
                if config.workers > 1:
                    harness = _level_in_workers(ep, model, config, specs, concurrency, rate, t0,
                                                appender, stop, seed=level, deadline_s=timed)
                else:
                    harness = run_coroutine(functools.partial(
                        _level_in_process, ep, model, config, specs, concurrency, rate, t0,
                        appender, stop, level, timed))
            except KeyboardInterrupt:
                stop.set()
                raise
            finally:
                appender.close()
                if bar is not None:
                    bar.close()
            load_after = hostload.sample()
            after = _scrape(control, ep, scrape_failures)
            records = appender.records
            counters = window(before, after) if before and after else None
            ok = [r for r in records if r.ok]
            foreign = None
            if counters is not None:
                foreign = foreign_traffic(counters, len(ok), sum(r.output_tokens or 0 for r in ok))
            level_summary = summarise_level(
                records, concurrency=concurrency, rate=rate, counters=counters,
                foreign=foreign, harness=harness)
            level_summary.update({"level": level, "repeat": repeat, "arm": arm,
                                  "prefix_cache_reset": cache_reset,
                                  "metrics_scrape": scrape_failures[0] if scrape_failures else "ok",
                                  "host_load": {**hostload.window(load_before, load_after),
                                                "host_probe_ms": probe_ms}})
            result.levels.append(level_summary)
            result.records.extend(records)
            with open(run.path / LEVELS_JSONL, "ab") as handle:
                handle.write(orjson.dumps(level_summary) + b"\n")
            write_json(run.path / SUMMARY_JSON, {"arm": arm, "levels": result.levels})
    finally:
        control.close()
        write_parquet(run.path)
    result.outcome = assess_levels(result.levels)
    run.update(outcome=result.outcome.to_dict())
    write_json(run.path / SUMMARY_JSON, {"arm": arm, "levels": result.levels,
                                         "outcome": result.outcome.to_dict()})
    if result.outcome.status == "failed":
        # Stop here: a notebook must not go on to compute speedups from an empty arm.
        raise SpeclabError(result.outcome.sentence or "Nothing was measured.")
    return result


def bench(
    target: Any,
    config: SweepConfig,
    *,
    name: str = "bench",
    run_dir: str | Path | None = None,
    outputs_root: str | Path | None = None,
    plan: Plan | None = None,
    progress: bool = True,
    live: Any = None,
) -> SweepResult:
    """Serve (or reach) ``target``, sweep it, and record everything in one run folder.

    ``target`` is a :class:`speclab.serve.target.ServerTarget`. The CLI's ``speclab bench`` and
    the notebooks call this same function. ``live``: a
    :class:`speclab.serve.target.LiveServer` already serving ``target`` (one the caller started
    for something else), swept as it is instead of starting another.
    """
    from speclab.serve.target import serve_target

    if config.api_key_env and not target.api_key_env:
        target = target.model_copy(update={"api_key_env": config.api_key_env})
    # Bad input stops here, before a server starts and before a run folder exists.
    plan = check_before_sweep(config, plan, run_dir)
    # The same manifest shape as a notebook run: flat params, the sweep beside them.
    params = {"mode": target.mode, "endpoint": target.endpoint, "dtype": target.dtype,
              "option": target.option.model_dump(mode="json"), **config.sweep_only().model_dump(mode="json")}
    run = Run.create(name, params, kind="bench", run_dir=run_dir, outputs_root=outputs_root)
    arm = target.option.method
    with run.recording(), contextlib.ExitStack() as stack:
        if live is None:
            live = stack.enter_context(serve_target(target, run))
        else:
            run.set_server(live.identity)
        return measure_sweep(live.endpoint, live.model, config, run, plan=plan, arm=arm, progress=progress)
