"""Workbook layer of the traffic replay: one call for ``speclab replay-logs`` and 01-baseline.

It also checks the local tokenisation against a live server's ``/tokenize``
(:func:`check_against_server`), which the analysis modules may not talk to.

Loads the served model's tokenizer (the embedded model by default), replays the log
(:func:`speclab.traffic.replay.replay_log`), predicts the day with a step-time model when one
is given (:func:`speclab.traffic.day.predict_day`), writes the tables next to the batches and a
report section (``kind="traffic-replay"``) for 05-report.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from speclab.errors import SpeclabError
from speclab.params import BaselineParams
from speclab.predict.costmodel import CalibratedStepTime
from speclab.sections import write_section
from speclab.traffic.day import TrafficDay, acceptance_by, predict_day, traffic_vs_benchmark
from speclab.traffic.logs import LogFormat, LogRecord, iter_log_batches
from speclab.traffic.replay import LogReplay, ReplayOption, replay_log
from speclab.traffic.tokens import ChatTokenizer

__all__ = ["TrafficReport", "check_against_server", "replay_traffic", "traffic_for_baseline"]

SECTION_KIND = "traffic-replay"
_GROUPS = ("category", "tenant", "output_length_bucket")


@dataclass
class TrafficReport:
    """What a traffic replay found: the replay, acceptance tables, the predicted day."""

    replay: LogReplay
    acceptance: dict[str, pd.DataFrame]
    day: TrafficDay | None
    comparison: pd.DataFrame | None
    tokenizer_check: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def throughput(self) -> dict[str, Any]:
        """Replay speed: output positions per second of replay work and of wall time."""
        s = self.replay.stats
        busy = sum(s["replay_s"].values())
        return {"requests": s["records"], "output_positions": s["positions"],
                "logged_tokens": s["prompt_tokens"] + s["output_tokens"], "engine": s.get("engine"),
                # "encode_s", not "tokenize_s": the manifest redacts keys that contain "token"
                "workers": s.get("workers"), "wall_s": s.get("wall_s"), "encode_s": s["tokenize_s"],
                "replay_s_by_option": s["replay_s"],
                "positions_per_core_s_by_option": {label: s["positions"] / sec for label, sec in s["replay_s"].items()
                                                   if sec},
                "positions_per_s_per_option_core": (s["positions"] * len(s["replay_s"]) / busy) if busy else None}


def _model_folder(model_dir: str | Path | None) -> Path:
    if model_dir is not None:
        return Path(model_dir).expanduser()
    from speclab.serve.embedded import model_dir as embedded_model_dir

    return embedded_model_dir()


def _max_model_len(folder: Path, given: int | None) -> int:
    from speclab.predict.replay import DEFAULT_MAX_MODEL_LEN

    if given:
        return given
    config = folder / "config.json"
    if config.exists():
        value = json.loads(config.read_text()).get("max_position_embeddings")
        if value:
            return int(value)
    return DEFAULT_MAX_MODEL_LEN


def replay_traffic(log: str | Path, run_dir: str | Path, options: list[ReplayOption], *,
                   model_dir: str | Path | None = None, cost_model: Any = None, load_time_s: float = 1800.0,
                   workers: int | None = None, ray_address: str | None = None, batch_size: int = 2000,
                   fmt: LogFormat = "auto", max_rows: int | None = None, bin_minutes: float = 15.0,
                   max_model_len: int | None = None, benchmark_predictions: pd.DataFrame | None = None,
                   server_url: str | None = None, served_model: str | None = None,
                   api_key_env: str | None = None, suffix_python: str | None = None, progress: bool = True,
                   title: str | None = None,
                   section_dir: str | Path | None = None) -> TrafficReport:
    """Replay ``log`` into ``run_dir`` and predict the day; writes tables and the report section.

    ``cost_model``: a step-time model (01-baseline's, or :func:`speclab.traffic.day.given_cost_model`);
    without one only acceptance is reported. ``server_url``: compare the local tokenisation
    with the server's ``/tokenize`` on a sample first. ``suffix_python``: the interpreter that
    has arctic-inference (default: the embedded server venv's). ``section_dir``: the run
    folder whose report section this becomes (default ``run_dir``).
    """
    run_dir = Path(run_dir)
    folder = _model_folder(model_dir)
    tokenizer = ChatTokenizer.from_folder(folder) if (folder / "tokenizer.json").exists() else None
    if tokenizer is None and model_dir is not None:
        raise SpeclabError(f"{folder} has no tokenizer.json; pass the served model's local folder.")
    notes: list[str] = []
    if tokenizer is None:
        notes.append(f"no tokenizer at {folder}: the log must carry token ids")
    check: list[dict[str, Any]] = []
    if server_url and tokenizer is not None:
        sample = next(iter_log_batches(log, 64, fmt), None)
        check = check_against_server(tokenizer, sample.records if sample else [], server_url, served_model,
                                     api_key_env=api_key_env)
        bad = [row for row in check if not row["match"]]
        if bad:
            raise SpeclabError(f"{len(bad)} of {len(check)} sampled prompts tokenise differently from the server's "
                               f"/tokenize (first: {bad[0]['request_id']}); pass the served model's folder.")
    if suffix_python is None and any(o.method == "suffix" for o in options):
        from speclab.paths import server_python

        suffix_python = str(server_python())
    replay = replay_log(log, run_dir, options, tokenizer=tokenizer, batch_size=batch_size, fmt=fmt,
                        max_model_len=_max_model_len(folder, max_model_len), workers=workers,
                        ray_address=ray_address, suffix_python=suffix_python, max_rows=max_rows, progress=progress)
    notes.extend(replay.notes)
    if replay.bad_rows:
        notes.append(f"{replay.bad_rows} of {replay.rows} log rows were unusable (first: "
                     f"row {replay.bad_examples[0]['row']}: {replay.bad_examples[0]['reason']})")
    acceptance = {"overall": acceptance_by(replay.requests)}
    for key in _GROUPS:
        acceptance[key] = acceptance_by(replay.requests, [key])
    for name, table in acceptance.items():
        table.to_parquet(run_dir / f"traffic_acceptance_{name}.parquet", index=False)
    day = comparison = None
    if cost_model is not None and replay.requests["timestamp_s"].notna().any():
        day = predict_day(replay.requests, cost_model, load_time_s=load_time_s, bin_s=bin_minutes * 60.0)
        notes.extend(day.notes)
        day.per_bin.to_parquet(run_dir / "traffic_day_bins.parquet", index=False)
        day.per_option.to_parquet(run_dir / "traffic_day.parquet", index=False)
        comparison = traffic_vs_benchmark(day, benchmark_predictions)
        comparison.to_parquet(run_dir / "traffic_vs_benchmark.parquet", index=False)
    elif cost_model is None:
        notes.append("no cost model: acceptance only (give a baseline run or a cost-model file for tok/s and payback)")
    else:
        notes.append("the log has no timestamps: no concurrency profile, no day prediction")
    report = TrafficReport(replay, acceptance, day, comparison, check, notes)
    _write_section(report, Path(section_dir or run_dir), Path(log).name, title)
    return report


def traffic_for_baseline(params: BaselineParams, run_dir: str | Path, cost_model: CalibratedStepTime | None,
                         predicted: pd.DataFrame,
                         progress: bool = False, workers: int | None = -1) -> TrafficReport:
    """01-baseline's ``traffic_log``: the options it predicts, replayed over the log with its
    cost model and restart time; batches under ``<run>/traffic``, the section in the run.
    ``workers``: local Ray CPUs (-1: all cores; None: this process, no Ray)."""
    import os

    from speclab.runs import read_json
    from speclab.workbook import prediction_options

    if not params.traffic_log:
        raise SpeclabError("01-baseline's traffic_log is not set; give it the path of a request log to replay.")
    options = [ReplayOption(method=o.method, k=o.num_speculative_tokens, prompt_lookup_min=o.prompt_lookup_min,
                            prompt_lookup_max=o.prompt_lookup_max)
               for o in prediction_options(params.predict_methods, params.predict_k, params.predict_suffix_k)]
    server = read_json(Path(run_dir) / "manifest.json").get("server") or {}
    return replay_traffic(params.traffic_log, Path(run_dir) / "traffic", options, model_dir=params.traffic_model,
                          cost_model=cost_model, load_time_s=float(server.get("load_time_s") or 1800.0),
                          workers=(os.cpu_count() or 1) if workers == -1 else workers,
                          benchmark_predictions=predicted, progress=progress,
                          section_dir=run_dir)


def _write_section(report: TrafficReport, run_dir: Path, log_name: str, title: str | None) -> None:
    from speclab.traffic.plots import acceptance_bars, day_profile

    r = report.replay
    speed = report.throughput()
    summary = [f"Replayed {r.stats['records']:,} requests from {log_name} ({r.bad_rows} bad rows of {r.rows:,}): "
               f"{r.stats['positions']:,} output positions per option, {r.stats.get('engine')}"
               + (f" with {r.stats['workers']} workers" if r.stats.get("workers") else "")
               + f", {r.stats.get('wall_s', 0):.1f} s wall."]
    overall = report.acceptance["overall"]
    for row in overall.to_dict("records"):
        summary.append(f"{row['option']}: acceptance rate {row['acceptance_rate']:.2f}, mean acceptance length "
                       f"{row['mean_acceptance_length']:.2f} over the log.")
    tables: dict[str, pd.DataFrame] = {
        "acceptance_overall": overall, "acceptance_by_category": report.acceptance["category"],
        "acceptance_by_tenant": report.acceptance["tenant"],
        "acceptance_by_output_length": report.acceptance["output_length_bucket"].assign(
            output_length_bucket=lambda f: f["output_length_bucket"].astype(str)),
    }
    figures: dict[str, Any] = {"acceptance_by_category": acceptance_bars(report.acceptance["category"], "category")}
    if report.day is not None:
        best = report.day.per_option.sort_values("server_hours_saved_per_day", ascending=False).iloc[0]
        verdict = (f"pays back a restart after {best['payback_hours']:.1f} h" if best["pays_back"]
                   else "never pays back a restart")
        summary.append(f"Best on this traffic: {best['option']}, predicted day speedup "
                       f"{best['predicted_speedup']:.2f}x, {best['server_hours_saved_per_day']:.2f} server-hours "
                       f"saved per day; it {verdict}.")
        tables["day_by_option"] = report.day.per_option
        tables["concurrency_profile"] = report.day.profile
        figures["day_profile"] = day_profile(report.day.per_bin)
    if report.comparison is not None:
        tables["traffic_vs_benchmark"] = report.comparison
    tables["replay_throughput"] = pd.DataFrame([{k: v for k, v in speed.items() if not k.endswith("by_option")}])
    write_section(run_dir, kind=SECTION_KIND, title=title or f"Your traffic, predicted ({log_name})",
                  summary=summary, tables=tables, figures=figures, notes=report.notes)
    import matplotlib.pyplot as plt

    for fig in figures.values():
        plt.close(fig)


def check_against_server(tokenizer: ChatTokenizer, records: Sequence[LogRecord], base_url: str,
                         model: str | None = None, sample: int = 8, timeout_s: float = 10.0,
                         transport: Any = None, api_key_env: str | None = None) -> list[dict[str, Any]]:
    """Compare the local prompt ids with the server's ``POST /tokenize`` for up to ``sample``
    chat records; one row per record (``match`` True when identical).

    ``base_url``: any spelling of the server's URL (vLLM serves ``/tokenize`` at the root);
    the key from ``$api_key_env`` (or credentials in the URL) goes with every request, and
    neither ever appears in an error.
    """
    import httpx

    from speclab.auth import auth_headers, auth_refused, basic_auth_headers
    from speclab.urls import Endpoint

    endpoint = Endpoint.parse(base_url)
    headers = auth_headers(api_key_env) or basic_auth_headers(endpoint)
    url = endpoint.without_credentials().at_root("tokenize")
    chosen = [r for r in records if r.messages is not None and r.prompt_token_ids is None][:sample]
    local = tokenizer.tokenize(chosen).prompts if chosen else []
    rows = []
    with httpx.Client(timeout=timeout_s, transport=transport, headers=headers) as client:
        for record, ids in zip(chosen, local, strict=True):
            body: dict[str, Any] = {"messages": record.messages, "add_generation_prompt": True}
            if model:
                body["model"] = model
            try:
                response = client.post(url, json=body)
                if response.status_code in (401, 403):
                    raise auth_refused(response.status_code, url, api_key_env)
                response.raise_for_status()
            except httpx.HTTPError as exc:
                reason = f"HTTP {exc.response.status_code}" if isinstance(exc, httpx.HTTPStatusError) else type(exc).__name__
                raise SpeclabError(
                    f"The server at {endpoint.public} did not tokenize ({reason}); check --server or leave it out."
                ) from None
            served = response.json().get("tokens") or []
            first = next((i for i, (a, b) in enumerate(zip(ids, served, strict=False)) if a != b), min(len(ids), len(served)))
            rows.append({"request_id": record.request_id, "local_tokens": len(ids), "server_tokens": len(served),
                         "match": list(ids) == list(served),
                         "first_difference": None if list(ids) == list(served) else first})
    return rows
