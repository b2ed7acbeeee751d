"""Server counters you can trust: /metrics snapshots and the deltas between two of them.

vLLM and SGLang publish Prometheus text at the server root (``<root>/metrics``, never under
``/v1``). Every figure here comes from the *difference* between a snapshot taken before a
measured run and one taken after it (docs/measurement.md section 3): cumulative counters mix in
warm-up and every earlier run. Counters are server-wide, so :func:`foreign_traffic` says
whether someone else's requests landed in the window, and a server restart between the two
snapshots is flagged (``counters_reset``) instead of producing negative numbers.

Metric names were read from the engines' source: vLLM 0.32 ``vllm/v1/metrics/loggers.py``,
``vllm/v1/spec_decode/metrics.py``; SGLang ``python/sglang/srt/metrics/collector.py`` (newer
releases: ``python/sglang/srt/observability/metrics_collector.py``). Spellings that changed
across releases live in one table, :data:`ALIASES`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as _openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from speclab.errors import SpeclabError
from speclab.options import Engine
from speclab.urls import Endpoint

__all__ = [
    "ALIASES",
    "CounterWindow",
    "counter_delta",
    "histogram_mean",
    "MetricsSnapshot",
    "SpecDecodeInfo",
    "ascrape_metrics",
    "foreign_traffic",
    "parse_metrics",
    "parse_sglang_server_info",
    "scrape_metrics",
    "spec_decode_info",
    "window",
]

Labels = tuple[tuple[str, str], ...]
SampleKey = tuple[str, Labels]

# Each quantity with every spelling a server may use, newest first. Counters and histograms
# are listed by their base name (``_total`` / ``_sum`` / ``_count`` are added on lookup).
# The first spelling the server exposes wins; spellings are never summed, because vLLM
# 0.10/0.11 served the deprecated and the new name side by side with the same data.
ALIASES: Mapping[str, tuple[str, ...]] = {
    # vLLM speculative decoding counters (vllm/v1/spec_decode/metrics.py, SpecDecodingProm).
    "spec_drafts": ("vllm:spec_decode_num_drafts",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens",),
    "spec_accepted_per_pos": ("vllm:spec_decode_num_accepted_tokens_per_pos",),
    # SGLang: verify forwards, counted when a request finishes (observe_one_finished_request).
    "spec_verify_calls": ("sglang:spec_verify_calls",),
    # Request and token counters.
    "requests": ("vllm:request_success", "sglang:num_requests"),
    "generation_tokens": ("vllm:generation_tokens", "sglang:generation_tokens"),
    "prompt_tokens": ("vllm:prompt_tokens", "sglang:prompt_tokens"),
    # Latency histograms.
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    # Per request: (e2e - ttft) / (output tokens - 1); vLLM >= 0.11 only.
    "tpot": ("vllm:request_time_per_output_token_seconds",),
    # Per engine step (vLLM) or per token (SGLang). vLLM renamed time_per_output_token_seconds
    # to inter_token_latency_seconds (PR #24110, removed in #32661).
    "itl": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
    ),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    "queue": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    # Gauges, read at the end of the window.
    "requests_running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "requests_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
    ),
    # Prefix caching (tokens; computed = queries - hits) and per-request prefill, which the live
    # verify-cost probe reads (vllm/v1/metrics/loggers.py; SGLang's TokenizerMetricsCollector
    # counts a finished request's prompt and cached tokens).
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "sglang:prompt_tokens"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "sglang:cached_tokens"),
    "prefill_time": ("vllm:request_prefill_time_seconds",),
    "prefill_computed_tokens": ("vllm:request_prefill_kv_computed_tokens",),
    "sglang_spec_accept_length": ("sglang:spec_accept_length",),
    "sglang_spec_accept_rate": ("sglang:spec_accept_rate",),
    "sglang_spec_num_steps": ("sglang:spec_num_steps",),
}

# Sample names that only ever grow while the server lives, by family type.
_MONOTONIC_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("_count", "_sum"),
}
# prometheus_client publishes the process start time; a change means a restart.
_START_TIME = "process_start_time_seconds"
# Ask for the classic text format; prometheus_client's ASGI app negotiates on Accept.
_ACCEPT = {"Accept": "text/plain;version=0.0.4;q=1.0, */*;q=0.1"}


@dataclass(frozen=True)
class MetricsSnapshot:
    """One /metrics response, parsed.

    ``samples`` maps (sample name, sorted label pairs) to the value, e.g.
    ``("vllm:generation_tokens_total", (("engine", "0"), ("model_name", "m")))``.
    ``families`` holds the family names the parser reported, ``taken_at`` is a
    ``time.perf_counter()`` reading (comparable only within one process), ``source``
    names where the text came from, for messages, and ``monotonic`` lists the sample
    names that only grow while the server lives (counter totals, histogram and summary
    counts, sums and buckets), which is how a restart is recognised.
    """

    samples: Mapping[SampleKey, float]
    families: frozenset[str]
    taken_at: float
    source: str = "the server"
    monotonic: frozenset[str] = frozenset()
    _by_name: Mapping[str, tuple[tuple[Labels, float], ...]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        index: dict[str, list[tuple[Labels, float]]] = {}
        for (name, labels), value in self.samples.items():
            index.setdefault(name, []).append((labels, value))
        object.__setattr__(self, "_by_name", {k: tuple(v) for k, v in index.items()})

    def has(self, name: str) -> bool:
        """True when at least one sample is named exactly ``name``."""
        return name in self._by_name

    def series(self, name: str, **label_filter: str) -> dict[Labels, float]:
        """Every label set of sample ``name`` (exact name) whose labels match the filter."""
        wanted = {k: str(v) for k, v in label_filter.items()}
        return {
            labels: value
            for labels, value in self._by_name.get(name, ())
            if all(dict(labels).get(k) == v for k, v in wanted.items())
        }

    def total(self, name: str, **label_filter: str) -> float | None:
        """Sum of sample ``name`` over the label sets matching the filter; None when absent.

        Names match exactly: ``vllm:spec_decode_num_accepted_tokens_total`` never includes
        ``vllm:spec_decode_num_accepted_tokens_per_pos_total``.
        """
        found = self.series(name, **label_filter)
        if not found:
            return None
        return float(sum(found.values()))

    @property
    def engine(self) -> Engine | None:
        """``"vllm"`` or ``"sglang"`` from the metric prefixes; None for anything else."""
        if any(name.startswith("vllm:") for name in self._by_name):
            return "vllm"
        if any(name.startswith("sglang:") for name in self._by_name):
            return "sglang"
        return None


def parse_metrics(
    text: str, taken_at: float | None = None, *, source: str = "the server"
) -> MetricsSnapshot:
    """Parse Prometheus text (or OpenMetrics, recognised by its ``# EOF``) into a snapshot.

    ``taken_at`` defaults to ``time.perf_counter()`` now. Raises :class:`SpeclabError` when
    the text is empty or is not Prometheus exposition (an HTML error page, JSON, ...).
    """
    stamp = time.perf_counter() if taken_at is None else taken_at
    if not text.strip():
        raise SpeclabError(
            f"The /metrics response from {source} is empty; "
            "check that the URL points at a vLLM or SGLang server with metrics enabled."
        )
    is_openmetrics = text.rstrip().endswith("# EOF")
    parser = _openmetrics_families if is_openmetrics else text_string_to_metric_families
    samples: dict[SampleKey, float] = {}
    families: set[str] = set()
    monotonic: set[str] = set()
    try:
        for family in parser(text):
            families.add(family.name)
            for sample in family.samples:
                labels = tuple(sorted((str(k), str(v)) for k, v in sample.labels.items()))
                samples[(sample.name, labels)] = float(sample.value)
                if _is_monotonic(family.type, family.name, sample.name):
                    monotonic.add(sample.name)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise SpeclabError(
            f"The /metrics response from {source} is not Prometheus text; "
            "check that the URL points at a vLLM or SGLang server (metrics live at the root).",
            detail=f"parser said: {exc}\nfirst bytes: {text[:200]!r}",
        ) from exc
    if not samples:
        raise SpeclabError(
            f"The /metrics response from {source} holds no samples; "
            "check that the URL points at a vLLM or SGLang server with metrics enabled."
        )
    return MetricsSnapshot(
        samples=samples,
        families=frozenset(families),
        taken_at=stamp,
        source=source,
        monotonic=frozenset(monotonic),
    )


def _is_monotonic(family_type: str, family_name: str, sample_name: str) -> bool:
    suffixes = _MONOTONIC_SUFFIXES.get(family_type)
    if suffixes is not None:
        return sample_name.endswith(suffixes) or (
            family_type == "counter" and sample_name == family_name
        )
    # Untyped text: trust the naming convention for counters only.
    return family_type in ("unknown", "untyped") and sample_name.endswith("_total")


def scrape_metrics(client: httpx.Client, endpoint: Endpoint | str) -> MetricsSnapshot:
    """GET ``<root>/metrics`` with ``client`` and parse it.

    A base URL given with ``/v1`` still reaches the root. ``taken_at`` is the midpoint of
    the request, the best estimate of when the server read its counters. Network failures
    and non-2xx answers raise :class:`SpeclabError` with one sentence.
    """
    url = _metrics_url(endpoint)
    sent = time.perf_counter()
    try:
        response = client.get(url, headers=_ACCEPT)
    except httpx.HTTPError as exc:
        raise _unreachable(url, exc) from exc
    received = time.perf_counter()
    return _snapshot_from_response(response, url, (sent + received) / 2)


async def ascrape_metrics(client: httpx.AsyncClient, endpoint: Endpoint | str) -> MetricsSnapshot:
    """Async twin of :func:`scrape_metrics`, same promises."""
    url = _metrics_url(endpoint)
    sent = time.perf_counter()
    try:
        response = await client.get(url, headers=_ACCEPT)
    except httpx.HTTPError as exc:
        raise _unreachable(url, exc) from exc
    received = time.perf_counter()
    return _snapshot_from_response(response, url, (sent + received) / 2)


def _metrics_url(endpoint: Endpoint | str) -> str:
    parsed = endpoint if isinstance(endpoint, Endpoint) else Endpoint.parse(endpoint)
    return parsed.at_root("metrics")


def _unreachable(url: str, exc: httpx.HTTPError) -> SpeclabError:
    return SpeclabError(
        f"Could not read {url} ({type(exc).__name__}: {exc}); "
        "check that the server is running and reachable."
    )


def _snapshot_from_response(response: httpx.Response, url: str, taken_at: float) -> MetricsSnapshot:
    if response.status_code == 404:
        raise SpeclabError(
            f"{url} answered HTTP 404; vLLM serves /metrics by default, "
            "SGLang only when started with --enable-metrics."
        )
    if not response.is_success:
        raise SpeclabError(
            f"{url} answered HTTP {response.status_code}; the server could not report its metrics.",
            detail=response.text[:500] or None,
        )
    return parse_metrics(response.text, taken_at, source=url)


# ---------------------------------------------------------------------------------------
# Reading quantities from snapshots


def _counter_names(base: str) -> tuple[str, str]:
    # prometheus_client appends _total; older or hand-rolled exporters send the bare name.
    return (base + "_total", base)


def _counter_spelling(snapshots: Iterable[MetricsSnapshot], quantity: str) -> str | None:
    """The sample name of ``quantity`` as a counter, taken from the first snapshot having one."""
    for snap in snapshots:
        for base in ALIASES[quantity]:
            for name in _counter_names(base):
                if snap.has(name):
                    return name
    return None


def _histogram_spelling(snapshots: Iterable[MetricsSnapshot], quantity: str) -> str | None:
    for snap in snapshots:
        for base in ALIASES[quantity]:
            if snap.has(base + "_count"):
                return base
    return None


def _series_delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> float | None:
    """Sum over label sets of after - before; a series absent before counts from zero.

    SGLang creates labelled counters lazily on first use, so a series may appear inside
    the window; vLLM creates its series at start-up.
    """
    now = after.series(name)
    if not now:
        return None
    then = before.series(name)
    return float(sum(value - then.get(labels, 0.0) for labels, value in now.items()))


def _delta(before: MetricsSnapshot, after: MetricsSnapshot, quantity: str) -> float | None:
    name = _counter_spelling((after, before), quantity)
    return None if name is None else _series_delta(before, after, name)


def _histogram_mean(before: MetricsSnapshot, after: MetricsSnapshot, quantity: str) -> float | None:
    base = _histogram_spelling((after,), quantity)
    if base is None:
        return None
    count = _series_delta(before, after, base + "_count")
    total = _series_delta(before, after, base + "_sum")
    if not count or total is None or count <= 0:
        return None
    return total / count


def counter_delta(before: MetricsSnapshot, after: MetricsSnapshot, quantity: str) -> float | None:
    """A counter's growth between two snapshots (``quantity`` from :data:`ALIASES`), None when absent."""
    return _delta(before, after, quantity)


def histogram_mean(before: MetricsSnapshot, after: MetricsSnapshot, quantity: str) -> float | None:
    """A histogram's mean observation between two snapshots, None when absent or unobserved."""
    return _histogram_mean(before, after, quantity)


def multi_token_steps(before: MetricsSnapshot, after: MetricsSnapshot) -> int | None:
    """Engine steps between two snapshots that computed more than one token, from vLLM's
    ``vllm:iteration_tokens_total`` histogram (all steps minus those in its ``le="1.0"`` bucket);
    None where the server publishes no such histogram (SGLang)."""
    name = "vllm:iteration_tokens_total"
    counts = [s.total(f"{name}_count") for s in (before, after)]
    ones = [s.total(f"{name}_bucket", le="1.0") for s in (before, after)]
    if None in counts or None in ones:
        return None
    return int(round((counts[1] - counts[0]) - (ones[1] - ones[0])))  # type: ignore[operator]


def gauge(snapshot: MetricsSnapshot, quantity: str) -> float | None:
    """A gauge's current value (``requests_running``, ``requests_waiting``, ...), None where absent."""
    return _gauge(snapshot, quantity)


def _gauge(snapshot: MetricsSnapshot, quantity: str) -> float | None:
    """Mean of a gauge over its label sets, ignoring SGLang's draft-model engine.

    SGLang repeats scheduler gauges per rank and, in newer releases, once more for the
    draft model (``engine_type="draft"``); the target's ranks carry the same figure.
    """
    for name in ALIASES[quantity]:
        found = snapshot.series(name)
        if not found:
            continue
        target = [v for labels, v in found.items() if dict(labels).get("engine_type") != "draft"]
        values = [v for v in (target or list(found.values())) if math.isfinite(v)]
        return sum(values) / len(values) if values else None
    return None


def _per_position(snapshot: MetricsSnapshot) -> tuple[str | None, dict[int, Labels]]:
    name = _counter_spelling((snapshot,), "spec_accepted_per_pos")
    if name is None:
        return None, {}
    return name, {
        int(dict(labels)["position"]): labels
        for labels in snapshot.series(name)
        if dict(labels).get("position", "").isdigit()
    }


def _per_position_delta(before: MetricsSnapshot, after: MetricsSnapshot) -> tuple[int, ...] | None:
    name, _ = _per_position(after)
    if name is None:
        return None
    sums: dict[int, float] = {}
    then = before.series(name)
    for labels, value in after.series(name).items():
        position = dict(labels).get("position", "")
        if position.isdigit():
            # Several engines (data parallel) each publish every position: add them up.
            delta = value - then.get(labels, 0.0)
            sums[int(position)] = sums.get(int(position), 0.0) + delta
    # Order by the number, not the text: "10" sorts before "2" as a string.
    return tuple(int(_count(sums[p]) or 0) for p in sorted(sums))


def _count(value: float | None) -> int | None:
    return None if value is None else round(value)


def _counters_reset(before: MetricsSnapshot, after: MetricsSnapshot) -> bool:
    """True when the server restarted (or otherwise lost counts) between the snapshots."""
    start_before, start_after = before.total(_START_TIME), after.total(_START_TIME)
    if start_before is not None and start_after is not None and start_before != start_after:
        return True
    for key, old in before.samples.items():
        name = key[0]
        new = after.samples.get(key)
        if name.endswith("_created"):
            # Creation stamps change only when the metric is created again.
            if new is not None and new != old:
                return True
            continue
        if name not in before.monotonic:
            continue
        if new is None or new < old:
            return True
    return False


# ---------------------------------------------------------------------------------------
# The window between two snapshots


@dataclass(frozen=True)
class CounterWindow:
    """What the server counted between two snapshots, from deltas only.

    Counts are ``None`` when the server lacks the counter or when ``counters_reset`` is
    set (the server restarted inside the window, so no delta can be trusted).
    ``d_requests`` counts finished requests of every finish reason (vLLM's
    ``finished_reason`` stop/length/abort/error/...; SGLang's ``num_requests_total``);
    ``window_s`` is the distance between the two ``taken_at`` readings. Derived
    ratios are ``None`` when their denominator is zero or missing, never NaN or negative.

    ``acceptance_source`` says where the acceptance figures came from: ``"counters"``
    (deltas over this window) or ``"gauge"`` (SGLang without ``spec_verify_calls_total``:
    its gauges describe the most recent batches at ``after``, not the window).
    Latency means are server-side histogram means over the window (d_sum / d_count):
    ``server_tpot_s_mean`` is per request; ``server_itl_s_mean`` is per engine step on vLLM
    (a step emits several tokens under speculation, so it exceeds TPOT there) and per token
    on SGLang.
    """

    engine: Engine | None
    window_s: float
    counters_reset: bool
    d_requests: int | None = None
    d_generation_tokens: int | None = None
    d_prompt_tokens: int | None = None
    d_drafts: int | None = None
    d_draft_tokens: int | None = None
    d_accepted_tokens: int | None = None
    d_accepted_per_position: tuple[int, ...] | None = None
    d_spec_verify_calls: int | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position_rates: tuple[float, ...] | None = None
    acceptance_source: Literal["counters", "gauge"] | None = None
    server_ttft_s_mean: float | None = None
    server_tpot_s_mean: float | None = None
    server_itl_s_mean: float | None = None
    server_e2e_s_mean: float | None = None
    server_queue_s_mean: float | None = None
    requests_running_after: float | None = None
    requests_waiting_after: float | None = None
    kv_cache_usage_after: float | None = None
    sglang_spec_accept_length_after: float | None = None
    sglang_spec_accept_rate_after: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Flat, JSON-ready record with unit-suffixed keys (tuples become lists)."""
        return {
            "engine": self.engine,
            "window_s": self.window_s,
            "counters_reset": self.counters_reset,
            "d_requests": self.d_requests,
            "d_generation_tokens": self.d_generation_tokens,
            "d_prompt_tokens": self.d_prompt_tokens,
            "d_drafts": self.d_drafts,
            "d_draft_tokens": self.d_draft_tokens,
            "d_accepted_tokens": self.d_accepted_tokens,
            "d_accepted_per_position": _as_list(self.d_accepted_per_position),
            "d_spec_verify_calls": self.d_spec_verify_calls,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "per_position_acceptance": _as_list(self.per_position_rates),
            "acceptance_source": self.acceptance_source,
            "server_ttft_s_mean": self.server_ttft_s_mean,
            "server_tpot_s_mean": self.server_tpot_s_mean,
            "server_itl_s_mean": self.server_itl_s_mean,
            "server_e2e_s_mean": self.server_e2e_s_mean,
            "server_queue_s_mean": self.server_queue_s_mean,
            "requests_running_after": self.requests_running_after,
            "requests_waiting_after": self.requests_waiting_after,
            "kv_cache_usage_after": self.kv_cache_usage_after,
            "sglang_spec_accept_length_after": self.sglang_spec_accept_length_after,
            "sglang_spec_accept_rate_after": self.sglang_spec_accept_rate_after,
        }


def _as_list(values: tuple[Any, ...] | None) -> list[Any] | None:
    return None if values is None else list(values)


def window(before: MetricsSnapshot, after: MetricsSnapshot) -> CounterWindow:
    """Deltas and derived figures between ``before`` and ``after`` (same server, in order).

    vLLM: acceptance rate = d_accepted / d_draft_tokens; mean acceptance length =
    1 + d_accepted / d_drafts (the 1 is the bonus token); per-position rate i =
    d_accepted_per_pos[i] / d_drafts, ordered by the numeric ``position`` label.
    SGLang: mean acceptance length = (d_generation_tokens - d_requests) / d_verify_calls
    (each request's first token comes from prefill, not from a verify), acceptance rate =
    (length - 1) / spec_num_steps; both approximate for requests cut short by max_tokens.
    Without ``sglang:spec_verify_calls_total`` the gauges at ``after`` are used instead.
    Raises :class:`SpeclabError` if the snapshots are out of order or from different engines.
    """
    if after.taken_at < before.taken_at:
        raise SpeclabError(
            "The 'after' /metrics snapshot was taken before the 'before' one; pass them in order."
        )
    engine = after.engine or before.engine
    if before.engine and after.engine and before.engine != after.engine:
        raise SpeclabError(
            f"The two /metrics snapshots come from different engines ({before.engine} then "
            f"{after.engine}); take both from the same server."
        )
    reset = _counters_reset(before, after)
    gauges: dict[str, Any] = {
        "requests_running_after": _gauge(after, "requests_running"),
        "requests_waiting_after": _gauge(after, "requests_waiting"),
        "kv_cache_usage_after": _gauge(after, "kv_cache_usage"),
        "sglang_spec_accept_length_after": _gauge(after, "sglang_spec_accept_length"),
        "sglang_spec_accept_rate_after": _gauge(after, "sglang_spec_accept_rate"),
    }
    span = after.taken_at - before.taken_at
    if reset:
        # A restart makes every delta meaningless; report the gauges, nothing derived.
        return CounterWindow(engine=engine, window_s=span, counters_reset=True, **gauges)

    def count(quantity: str) -> int | None:
        return _count(_delta(before, after, quantity))

    d_requests = count("requests")
    d_generation = count("generation_tokens")
    d_drafts = count("spec_drafts")
    d_draft_tokens = count("spec_draft_tokens")
    d_accepted = count("spec_accepted_tokens")
    d_per_pos = _per_position_delta(before, after)
    d_verify = count("spec_verify_calls")

    acceptance_rate: float | None = None
    mean_length: float | None = None
    per_position: tuple[float, ...] | None = None
    source: Literal["counters", "gauge"] | None = None
    if d_drafts is not None or d_draft_tokens is not None:
        if d_accepted is not None and d_draft_tokens:
            acceptance_rate = d_accepted / d_draft_tokens
        if d_accepted is not None and d_drafts:
            mean_length = 1.0 + d_accepted / d_drafts
        if d_per_pos is not None and d_drafts:
            per_position = tuple(n / d_drafts for n in d_per_pos)
        if acceptance_rate is not None or mean_length is not None:
            source = "counters"
    elif engine == "sglang":
        steps = _gauge(after, "sglang_spec_num_steps")
        if d_verify and d_generation is not None and d_requests is not None:
            mean_length = (d_generation - d_requests) / d_verify
            if steps and steps > 0:
                acceptance_rate = (mean_length - 1.0) / steps
            source = "counters"
        elif gauges["sglang_spec_accept_length_after"]:
            mean_length = gauges["sglang_spec_accept_length_after"]
            acceptance_rate = gauges["sglang_spec_accept_rate_after"]
            source = "gauge"

    return CounterWindow(
        engine=engine,
        window_s=span,
        counters_reset=False,
        d_requests=d_requests,
        d_generation_tokens=d_generation,
        d_prompt_tokens=count("prompt_tokens"),
        d_drafts=d_drafts,
        d_draft_tokens=d_draft_tokens,
        d_accepted_tokens=d_accepted,
        d_accepted_per_position=d_per_pos,
        d_spec_verify_calls=d_verify,
        acceptance_rate=acceptance_rate,
        mean_acceptance_length=mean_length,
        per_position_rates=per_position,
        acceptance_source=source,
        server_ttft_s_mean=_histogram_mean(before, after, "ttft"),
        server_tpot_s_mean=_histogram_mean(before, after, "tpot"),
        server_itl_s_mean=_histogram_mean(before, after, "itl"),
        server_e2e_s_mean=_histogram_mean(before, after, "e2e"),
        server_queue_s_mean=_histogram_mean(before, after, "queue"),
        **gauges,
    )


# ---------------------------------------------------------------------------------------
# Is speculation on, and is the window clean?


@dataclass(frozen=True)
class SpecDecodeInfo:
    """What a snapshot proves about speculative decoding.

    ``enabled`` is True only when the metrics show it: vLLM publishes its spec counters
    only with a speculative config; SGLang publishes its gauges always (0 when off), so on
    SGLang call this on a snapshot taken after some traffic. ``num_positions`` is k, the
    number of distinct ``position`` labels (vLLM) or ``sglang:spec_num_steps`` (SGLang).
    """

    enabled: bool
    num_positions: int | None
    engine: Engine | None


def spec_decode_info(snapshot: MetricsSnapshot) -> SpecDecodeInfo:
    """Whether speculation is really on in this server, and with how many positions."""
    engine = snapshot.engine
    if engine == "vllm":
        enabled = _counter_spelling((snapshot,), "spec_drafts") is not None
        _, positions = _per_position(snapshot)
        return SpecDecodeInfo(enabled, len(positions) or None, engine)
    if engine == "sglang":
        steps = _gauge(snapshot, "sglang_spec_num_steps")
        verify_name = _counter_spelling((snapshot,), "spec_verify_calls")
        verified = snapshot.total(verify_name) if verify_name else None
        length = _gauge(snapshot, "sglang_spec_accept_length")
        enabled = bool(
            (steps and steps > 0) or (verified and verified > 0) or (length and length > 0)
        )
        k = int(steps) if steps and steps > 0 else None
        return SpecDecodeInfo(enabled, k, engine)
    return SpecDecodeInfo(False, None, None)


def foreign_traffic(
    window: CounterWindow,
    client_requests: int,
    client_output_tokens: int,
    tolerance: float = 0.01,
) -> bool | None:
    """True when the server did more work in the window than this client asked for.

    Compares the server's finished-request delta with ``client_requests`` exactly (an
    extra finished request is someone else's, or a warm-up that ended inside the window)
    and its generation-token delta with ``client_output_tokens``, allowing ``tolerance``
    x the client's tokens of excess. On vLLM the two token counts are equal when the client
    sums ``usage.completion_tokens`` and scrapes ``after`` once its requests have finished
    (checked on a real capture); the slack exists because vLLM counts tokens per engine
    step, so a request the client abandoned mid-stream still adds tokens no usage chunk
    reports, and clients without usage have to count streamed chunks. Fewer than sent is
    never foreign: requests still running at ``after`` are not counted yet.
    Returns None when the server lacks both counters or the counters reset.
    """
    checks: list[bool] = []
    if window.d_requests is not None:
        checks.append(window.d_requests > client_requests)
    if window.d_generation_tokens is not None:
        slack = max(tolerance, 0.0) * max(client_output_tokens, 0)
        checks.append(window.d_generation_tokens > client_output_tokens + slack)
    if not checks:
        return None
    return any(checks)


def parse_sglang_server_info(info: Mapping[str, Any] | str | bytes) -> float | None:
    """SGLang's average acceptance length from ``/server_info`` (``/get_server_info``).

    Reads ``internal_states[i].avg_spec_accept_length`` (mean over data-parallel ranks,
    as SGLang's own tests do) or the older top-level ``avg_spec_accept_length``. The value
    is cumulative since the server started, not a window: use it on a fresh server or as
    a cross-check. None when absent (speculation off, or no verify yet).
    """
    if isinstance(info, (str, bytes)):
        try:
            info = json.loads(info)
        except ValueError as exc:
            raise SpeclabError(
                "The SGLang /server_info response is not JSON; check the URL.",
                detail=str(exc),
            ) from exc
    if not isinstance(info, Mapping):
        raise SpeclabError("The SGLang /server_info response is not a JSON object; check the URL.")
    states = info.get("internal_states")
    values: list[float] = []
    if isinstance(states, list):
        for state in states:
            if isinstance(state, Mapping):
                value = _finite(state.get("avg_spec_accept_length"))
                if value is not None:
                    values.append(value)
    if values:
        return sum(values) / len(values)
    return _finite(info.get("avg_spec_accept_length"))


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
