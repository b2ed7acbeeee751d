"""Acceptance replay: what a speculative option would have accepted, from a baseline run.

At temperature 0 the target's output does not depend on the proposer (speculation is
lossless), so a baseline run's greedy outputs are the tokens every speculative option
must emit. Replaying a proposer position by position over ``prompt_token_ids +
token_ids`` (both recorded by the server itself: vLLM's ``return_token_ids``) gives, for
each engine step, the draft, how much of it the target accepts, and so the counters the
server would have reported, before paying for a restart.

Engine semantics reproduced (vLLM 0.32, read from its source):

* **Steps.** The prefill step emits the first output token. After every step that emits
  tokens the proposer drafts from ``prompt + output so far``; the next step verifies the
  draft, accepts its longest prefix equal to the target's greedy tokens and adds one
  token of its own (the bonus / correction token). A request stops on EOS or
  ``max_tokens``; its last draft is never scheduled.
* **n-gram** (``vllm/v1/spec_decode/ngram_proposer.py``,
  ``_find_longest_matched_ngram_and_propose_tokens``): the longest suffix of the context
  of length in ``[prompt_lookup_min, prompt_lookup_max]`` that occurs earlier in the
  context (prompt and output alike); among equally long matches the EARLIEST occurrence
  wins; the draft is the up-to-``k`` tokens that follow it (fewer when the match sits
  near the end of the context; none when the context is shorter than ``prompt_lookup_min``
  or no n-gram matches), capped at ``max_model_len - len(context)``. :func:`ngram_propose`
  is a line-for-line port of vLLM's KMP search, so its tie-breaking is vLLM's.
* **suffix** (``vllm/v1/spec_decode/suffix_decoding.py`` over ArcticInference's
  ``SuffixDecodingCache``): a per-request tree of the prompt plus a server-wide tree of
  previous (and concurrent) responses; the draft length varies per step. The real
  ``arctic-inference`` package is run in the server venv (:func:`replay_suffix`); the
  result records which implementation produced it.
* **Counters** (``vllm/v1/core/sched/scheduler.py`` ``update_from_output`` and
  ``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingStats.observe_draft``): a step counts
  as a draft only when a non-empty draft was scheduled; ``num_draft_tokens`` += the
  draft's length (which may be < k), ``num_accepted_tokens`` += accepted drafts (bonus
  excluded), ``accepted_per_pos[i]`` += 1 for every ``i < accepted``. Derived exactly as
  :mod:`speclab.measure.metrics` derives them from counter deltas: acceptance rate =
  accepted / draft_tokens, mean acceptance length = 1 + accepted / drafts, per-position
  rate i = accepted_per_pos[i] / drafts.

Where the recorded output ends (EOS or max_tokens) inside a draft, the server compares
the rest of the draft with tokens it never returns; the replay counts those draft
positions as rejected and reports how many there were (``draft_tokens_past_output``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from speclab.errors import SpeclabError
from speclab.options import SpecOption
from speclab.paths import server_python

__all__ = [
    "ReplayResult",
    "ReplayStep",
    "baseline_requests",
    "ngram_propose",
    "replay_ngram",
    "replay_ngram_tokens",
    "replay_option",
    "replay_run",
    "replay_suffix",
    "summarise_steps",
]

# vLLM's default when neither prompt_lookup_min nor _max is set (config/speculative.py).
NGRAM_DEFAULT_LOOKUP = 5
# vllm/config/speculative.py suffix defaults
SUFFIX_DEFAULTS = {
    "suffix_decoding_max_tree_depth": 24,
    "suffix_decoding_max_cached_requests": 10000,
    "suffix_decoding_max_spec_factor": 1.0,
    "suffix_decoding_min_token_prob": 0.1,
}
DEFAULT_MAX_MODEL_LEN = 2048
TOKEN_SOURCE = "server: return_token_ids (prompt_token_ids with the chat template applied, token_ids)"


# --------------------------------------------------------------------------- n-gram


def ngram_propose(
    context: Sequence[int],
    min_n: int,
    max_n: int,
    k: int,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
) -> list[int]:
    """vLLM 0.32's n-gram draft for one context (a port of its numba KMP search).

    Finds the longest n-gram (``min_n <= n <= max_n``) that is a suffix of ``context``
    and occurs earlier in it; the earliest such occurrence wins; returns the up-to-``k``
    tokens that follow it (empty when nothing matches).
    """
    total = len(context)
    if total < min_n:
        return []
    k = min(k, max_model_len - total)
    if k <= 0:
        return []
    tokens = list(reversed(context))
    # lps[i]: longest proper prefix of tokens that is a suffix of tokens[: i + 1],
    # stored only for the first max_n positions (vLLM caps it the same way).
    lps = [0] * max_n
    longest = 0
    position = 0
    prev = 0
    i = 1
    while i < total:
        if tokens[prev] == tokens[i]:
            prev += 1
            # ">=": a later i in the reversed list is an earlier occurrence in context.
            if prev >= longest:
                longest = prev
                position = i
            if i < max_n:
                lps[i] = prev
            if prev == max_n:
                prev = lps[max_n - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_n:
        return []
    start = total - 1 - position + longest
    k = min(k, total - start)
    return list(context[start : start + k])


def ngram_settings(option: SpecOption) -> tuple[int, int, int]:
    """(min_n, max_n, k) as vLLM resolves them for an ngram option."""
    lo, hi = option.prompt_lookup_min, option.prompt_lookup_max
    # vllm/config/speculative.py: one side missing takes the other's value; both: 5.
    if lo is None and hi is None:
        lo = hi = NGRAM_DEFAULT_LOOKUP
    elif lo is None:
        lo = hi
    elif hi is None:
        hi = lo
    k = option.num_speculative_tokens
    if k is None:
        raise SpeclabError("An ngram option needs num_speculative_tokens (k); set it in the option.")
    assert lo is not None and hi is not None
    return lo, hi, k


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class ReplayStep:
    """One decode step of one request: the draft scheduled and what the target kept."""

    position: int  # output tokens already emitted before this step
    draft_tokens: int
    accepted_tokens: int
    emitted_tokens: int  # accepted + 1, clipped at the end of the recorded output
    draft_tokens_past_output: int = 0


def _verify(draft: Sequence[int], output: Sequence[int], position: int) -> tuple[int, int]:
    """Accepted draft tokens against the greedy output, and draft tokens past its end."""
    accepted = 0
    known = output[position : position + len(draft)]
    while accepted < len(known) and draft[accepted] == known[accepted]:
        accepted += 1
    past = len(draft) - len(known) if accepted == len(known) else 0
    return accepted, past


def replay_ngram_tokens(
    prompt_token_ids: Sequence[int],
    output_token_ids: Sequence[int],
    min_n: int,
    max_n: int,
    k: int,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
) -> list[ReplayStep]:
    """Every decode step vLLM's n-gram speculation takes to emit ``output_token_ids``."""
    prompt = list(prompt_token_ids)
    output = list(output_token_ids)
    steps: list[ReplayStep] = []
    position = 1  # the prefill step emitted output[0]
    while position < len(output):
        draft = ngram_propose(prompt + output[:position], min_n, max_n, k, max_model_len)
        accepted, past = _verify(draft, output, position)
        emitted = min(accepted + 1, len(output) - position)
        steps.append(ReplayStep(position, len(draft), accepted, emitted, past))
        position += accepted + 1
    return steps


@dataclass
class _Counters:
    k: int
    decode_steps: int = 0
    decode_tokens: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    draft_tokens_past_output: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.accepted_per_position:
            self.accepted_per_position = [0] * self.k

    def add(self, step: ReplayStep) -> None:
        self.decode_steps += 1
        self.decode_tokens += step.emitted_tokens
        self.draft_tokens_past_output += step.draft_tokens_past_output
        if step.draft_tokens:  # scheduler: only scheduled, non-empty drafts are counted
            self.drafts += 1
            self.draft_tokens += step.draft_tokens
            self.accepted_tokens += step.accepted_tokens
            for i in range(min(step.accepted_tokens, self.k)):
                self.accepted_per_position[i] += 1

    def row(self) -> dict[str, Any]:
        d, dt, acc, steps = self.drafts, self.draft_tokens, self.accepted_tokens, self.decode_steps
        out: dict[str, Any] = {
            "decode_steps": steps,
            "decode_tokens": self.decode_tokens,
            "drafts": d,
            "draft_tokens": dt,
            "accepted_tokens": acc,
            "draft_tokens_past_output": self.draft_tokens_past_output,
            "acceptance_rate": acc / dt if dt else None,
            "mean_acceptance_length": 1 + acc / d if d else None,
            # beside vLLM's figures: what the cost model needs
            "draft_fraction": d / steps if steps else None,
            "tokens_per_step": self.decode_tokens / steps if steps else None,
            "verified_tokens_per_step": (steps + dt) / steps if steps else None,
        }
        for i, count in enumerate(self.accepted_per_position):
            out[f"accepted_pos{i + 1}"] = count
            out[f"acceptance_pos{i + 1}"] = count / d if d else None
        return out


def summarise_steps(steps: Iterable[ReplayStep], k: int) -> dict[str, Any]:
    """vLLM-style counters and derived ratios for a set of steps."""
    counters = _Counters(k)
    for step in steps:
        counters.add(step)
    return counters.row()


# --------------------------------------------------------------------------- inputs


def baseline_requests(run_dir: str | Path) -> pd.DataFrame:
    """A baseline run's successful requests with their token ids, in send order.

    Raises SpeclabError when the run lacks token ids (a server without
    ``return_token_ids``) or was not run at temperature 0.
    """
    from speclab.runfolder import read_records
    from speclab.runs import read_json

    run_dir = Path(run_dir)
    rows = read_records(run_dir)
    if not rows:
        raise SpeclabError(f"{run_dir} holds no requests.jsonl rows; choose a finished baseline run folder.")
    frame = pd.DataFrame(rows)
    frame = frame[frame["ok"].fillna(False).astype(bool)].copy()
    for column in ("token_ids", "prompt_token_ids"):
        if column not in frame or frame[column].isna().any():
            raise SpeclabError(
                f"{run_dir} has requests without {column}; the replay needs the server's token ids "
                "(vLLM's return_token_ids). Rerun the baseline with a speclab that records them."
            )
    manifest = run_dir / "manifest.json"
    if manifest.exists():
        params = read_json(manifest).get("params") or {}
        temperature = (params.get("sweep") or params).get("temperature", 0.0) if isinstance(params, dict) else 0.0
        if temperature not in (None, 0, 0.0):
            raise SpeclabError(
                f"{run_dir} was sampled at temperature {temperature}; replay needs greedy outputs "
                "(temperature 0)."
            )
    frame = frame.sort_values(["level", "send_time_s"], kind="stable").reset_index(drop=True)
    return frame


def _max_model_len(run_dir: Path | None) -> int:
    if run_dir is None:
        return DEFAULT_MAX_MODEL_LEN
    from speclab.runs import read_json

    try:
        server = read_json(run_dir / "manifest.json").get("server") or {}
    except (OSError, ValueError):
        return DEFAULT_MAX_MODEL_LEN
    models = server.get("models") or [{}]
    return int(models[0].get("max_model_len") or DEFAULT_MAX_MODEL_LEN)


# --------------------------------------------------------------------------- results


@dataclass
class ReplayResult:
    """Per-request and per-step replay of one option over one baseline run.

    ``requests``: one row per request (counters + derived ratios, unit-suffixed names).
    ``steps``: one row per decode step (request_id, position, draft_tokens, ...).
    ``proposer_impl`` says which code produced the drafts; ``token_source`` where the
    token ids came from. ``proposer_us_per_seq_step``: the proposer's own calls timed during
    the replay, per sequence and step (suffix: ArcticInference's cache calls, the ones vLLM's
    proposer makes; None where not timed): what speculation costs the engine's CPU beyond
    the forward pass, to set against a step's milliseconds.
    """

    option: SpecOption
    k: int
    requests: pd.DataFrame
    steps: pd.DataFrame
    proposer_impl: str
    token_source: str = TOKEN_SOURCE
    notes: list[str] = field(default_factory=list)
    proposer_us_per_seq_step: float | None = None

    def by(self, *keys: str) -> pd.DataFrame:
        """Counters summed over groups (e.g. ``by("category")``), ratios recomputed."""
        return _aggregate(self.requests, list(keys), self.k)

    def by_category(self) -> pd.DataFrame:
        return self.by("category")

    def by_level(self) -> pd.DataFrame:
        return self.by("level", "concurrency")

    def by_category_level(self) -> pd.DataFrame:
        return self.by("category", "level", "concurrency")

    def overall(self) -> dict[str, Any]:
        frame = self.requests.assign(_all="all")
        return _aggregate(frame, ["_all"], self.k).drop(columns=["_all"]).iloc[0].to_dict()


_COUNT_COLUMNS = ("decode_steps", "decode_tokens", "drafts", "draft_tokens", "accepted_tokens",
                  "draft_tokens_past_output")


def _aggregate(frame: pd.DataFrame, keys: list[str], k: int) -> pd.DataFrame:
    counts = list(_COUNT_COLUMNS) + [f"accepted_pos{i + 1}" for i in range(k)]
    grouped = frame.groupby(keys, sort=True, dropna=False)[counts].sum().reset_index()
    grouped.insert(len(keys), "requests", frame.groupby(keys, sort=True, dropna=False).size().values)
    d, dt, steps = grouped["drafts"], grouped["draft_tokens"], grouped["decode_steps"]
    safe_d, safe_dt, safe_steps = d.where(d > 0), dt.where(dt > 0), steps.where(steps > 0)
    grouped["acceptance_rate"] = grouped["accepted_tokens"] / safe_dt
    grouped["mean_acceptance_length"] = 1 + grouped["accepted_tokens"] / safe_d
    grouped["draft_fraction"] = d / safe_steps
    grouped["tokens_per_step"] = grouped["decode_tokens"] / safe_steps
    grouped["verified_tokens_per_step"] = (steps + dt) / safe_steps
    for i in range(k):
        grouped[f"acceptance_pos{i + 1}"] = grouped[f"accepted_pos{i + 1}"] / safe_d
    return grouped


_ID_COLUMNS = ("request_id", "prompt_id", "category", "level", "concurrency", "repeat")


def _request_row(meta: dict[str, Any], steps: list[ReplayStep], k: int) -> dict[str, Any]:
    row = {c: meta.get(c) for c in _ID_COLUMNS}
    row["prompt_tokens"] = len(meta["prompt_token_ids"])
    row["output_tokens"] = len(meta["token_ids"])
    row["finish_reason"] = meta.get("finish_reason")
    row.update(summarise_steps(steps, k))
    return row


def _step_rows(request_id: str, steps: list[ReplayStep]) -> list[dict[str, Any]]:
    return [{"request_id": request_id, **s.__dict__} for s in steps]


def replay_ngram(requests: pd.DataFrame, option: SpecOption, max_model_len: int = DEFAULT_MAX_MODEL_LEN) -> ReplayResult:
    """Replay vLLM's n-gram proposer over every request of ``requests`` (see
    :func:`baseline_requests`)."""
    min_n, max_n, k = ngram_settings(option)
    rows: list[dict[str, Any]] = []
    step_rows: list[dict[str, Any]] = []
    for meta in requests.to_dict("records"):
        steps = replay_ngram_tokens(meta["prompt_token_ids"], meta["token_ids"], min_n, max_n, k, max_model_len)
        rows.append(_request_row(meta, steps, k))
        step_rows.extend(_step_rows(meta["request_id"], steps))
    return ReplayResult(
        option=option, k=k, requests=pd.DataFrame(rows), steps=pd.DataFrame(step_rows),
        proposer_impl="speclab port of vllm 0.32 NgramProposer (_find_longest_matched_ngram_and_propose_tokens)",
    )


# --------------------------------------------------------------------------- suffix

_SUFFIX_SCRIPT = Path(__file__).parents[1] / "scripts" / "suffix_replay.py"


def _suffix_settings(option: SpecOption) -> dict[str, Any]:
    settings: dict[str, Any] = dict(SUFFIX_DEFAULTS)
    settings.update({key: option.extra[key] for key in SUFFIX_DEFAULTS if key in option.extra})
    settings["k"] = option.num_speculative_tokens or settings["suffix_decoding_max_tree_depth"]
    return settings


def replay_suffix(
    requests: pd.DataFrame,
    option: SpecOption,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    python: str | Path | None = None,
    implementation: str = "auto",
) -> ReplayResult:
    """Replay suffix decoding over ``requests`` with ArcticInference's own cache.

    Requests are fed in engine order: each level in turn, ``concurrency`` requests at a
    time in send order, one engine step for every running request per round, so
    concurrent responses enter the server-wide tree as they grow, as on the server.
    ``implementation``: ``"arctic"`` (the package, run with the server venv's python),
    ``"speclab"`` (the pure-Python re-implementation in ``scripts/suffix_replay.py``;
    tie-breaking between equally frequent continuations may differ) or ``"auto"``
    (arctic where importable).
    """
    settings = _suffix_settings(option)
    settings["max_model_len"] = max_model_len
    settings["implementation"] = implementation
    payload = {
        "settings": settings,
        "requests": [
            {"request_id": r["request_id"], "level": int(r.get("level") or 0),
             "concurrency": int(r.get("concurrency") or 1),
             "prompt": [int(t) for t in r["prompt_token_ids"]], "output": [int(t) for t in r["token_ids"]]}
            for r in requests.to_dict("records")
        ],
    }
    interpreter = str(python or server_python())
    if implementation == "speclab" or not Path(interpreter).exists():
        import sys

        interpreter = sys.executable
        settings["implementation"] = "speclab"
    result = subprocess.run(
        [interpreter, str(_SUFFIX_SCRIPT)], input=json.dumps(payload), capture_output=True, text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise SpeclabError(
            "The suffix-decoding replay failed; its output ends with:", detail=result.stderr[-3000:]
        )
    answer = json.loads(result.stdout)
    k = settings["k"]
    by_id = {r["request_id"]: r for r in requests.to_dict("records")}
    rows, step_rows = [], []
    for request_id, raw_steps in answer["steps"].items():
        steps = [ReplayStep(*s) for s in raw_steps]
        rows.append(_request_row(by_id[request_id], steps, k))
        step_rows.extend(_step_rows(request_id, steps))
    notes = ["warm-up requests (unrecorded) also enter the server's suffix cache; the replay omits them"]
    return ReplayResult(
        option=option, k=k, requests=pd.DataFrame(rows), steps=pd.DataFrame(step_rows),
        proposer_impl=answer["implementation"], notes=notes,
        proposer_us_per_seq_step=(1e6 * answer["proposer_s"] / answer["proposer_seq_steps"]
                                  if answer.get("proposer_seq_steps") else None),
    )


# --------------------------------------------------------------------------- entry points


def replay_option(
    requests: pd.DataFrame, option: SpecOption, max_model_len: int = DEFAULT_MAX_MODEL_LEN
) -> ReplayResult:
    """Replay ``option`` (ngram, ngram_gpu or suffix) over baseline requests. ``ngram_gpu`` is
    replayed with the CPU proposer's lookup (the same keys; vLLM's GPU kernel takes the earliest
    match where the CPU one may take another, so its drafts can differ: said in the notes)."""
    if option.method == "ngram":
        return replay_ngram(requests, option, max_model_len)
    if option.method == "ngram_gpu":
        result = replay_ngram(requests, option.model_copy(update={"method": "ngram"}), max_model_len)
        result.option = option
        result.notes.append("ngram_gpu replayed with vLLM's CPU n-gram lookup: the GPU kernel matches the earliest "
                            "occurrence of the longest n-gram and may draft other tokens (assumed equal acceptance)")
        return result
    if option.method == "suffix":
        return replay_suffix(requests, option, max_model_len)
    raise SpeclabError(
        f"Replay covers the model-free proposers (ngram, ngram_gpu, suffix), not {option.method!r}; "
        "a drafter model's acceptance has to be measured."
    )


def replay_run(run_dir: str | Path, option: SpecOption) -> ReplayResult:
    """Replay ``option`` over a baseline run folder's requests (greedy, with token ids)."""
    run_dir = Path(run_dir)
    return replay_option(baseline_requests(run_dir), option, _max_model_len(run_dir))
