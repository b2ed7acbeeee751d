"""What notebook 03-eagle3-drafter calls: match check, the drafter run, the offline
prediction, Option D's plan and the report section. Method: `docs/eagle3.md`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from speclab.eagle3.match import DrafterMatch, require_drafter_match, text_config
from speclab.eagle3.plan import (
    DataPlan,
    HeadShape,
    Plan,
    StepTime,
    TargetShape,
    Throughput,
    check_step_time_choice,
    estimate_plan,
    scaled_step_time,
    shipped_step_times,
    step_time_from_record,
    write_plan,
)
from speclab.errors import SpeclabError
from speclab.params import Eagle3Params
from speclab.report.tables import run_id
from speclab.runfolder import RunData
from speclab.runs import Run
from speclab.workbook import OptionOutcome, repeat_baseline


def _read_json(path: str | Path, what: str) -> dict[str, Any]:
    file = Path(path).expanduser()
    try:
        return json.loads(file.read_text())
    except FileNotFoundError:
        raise SpeclabError(f"The {what} {file} does not exist; give the path of a config.json.") from None
    except json.JSONDecodeError:
        raise SpeclabError(f"The {what} {file} is not valid JSON; give the model's config.json.") from None


def resolve_drafter(params: Eagle3Params) -> tuple[str, dict[str, Any], dict[str, Any], str | None]:
    """The drafter to serve, its config, the target's config and the target's name.

    Embedded: the trained head (built and cached the first time: minutes) unless `drafter` is given.
    """
    drafter = params.drafter
    target_name = params.target_name
    if params.mode == "embedded":
        from speclab.eagle3.train import ensure_trained_head
        from speclab.serve.embedded import ensure_model, ensure_server_venv

        drafter = drafter or str(ensure_trained_head(seconds=params.head_train_seconds, prompts=params.head_prompts,
                                                     max_tokens=params.head_max_tokens, progress=params.interactive))
        model = ensure_model(ensure_server_venv())
        target_config = _read_json(params.target_config or model / "config.json", "target config")
        target_name = target_name or model.name
    else:
        if not drafter:
            raise SpeclabError("External mode needs 'drafter': the drafter path or hub id the server was started with.")
        if not params.target_config:
            raise SpeclabError("External mode needs 'target_config': a copy of the served model's config.json for the match check.")
        target_config = _read_json(params.target_config, "target config")
    config_path = params.drafter_config or Path(drafter).expanduser() / "config.json"
    drafter_config = _read_json(config_path, "drafter config")
    return drafter, drafter_config, target_config, target_name


def match_check(params: Eagle3Params) -> tuple[str, DrafterMatch]:
    """Refuse (one sentence) a bad ``plan_step_time`` or a drafter that cannot work on the
    target, before anything loads."""
    check_step_time_choice(params.plan_step_time)
    drafter, drafter_config, target_config, target_name = resolve_drafter(params)
    result = require_drafter_match(drafter_config, target_config, drafter_name=drafter, target_name=target_name)
    return drafter, result


def match_table(result: DrafterMatch) -> pd.DataFrame:
    """The fields compared, drafter beside target."""
    d, t = result.facts["drafter"], result.facts["target"]
    rows = [("hidden size read", d["target_hidden_size"], t["hidden_size"]),
            ("vocabulary", d["vocab_size"], t["vocab_size"]),
            ("draft vocabulary", d["draft_vocab_size"], None),
            ("captured layers", d["aux_layer_ids"], t["num_hidden_layers"]),
            ("architectures", d["architectures"], t["architectures"]),
            ("trained for", result.facts.get("trained_for"), result.facts.get("target_stem"))]
    return pd.DataFrame(rows, columns=["field", "drafter", "target"]).astype({"drafter": str, "target": str})


def launch_flags(params: Eagle3Params, drafter: str) -> str:
    """The restart this run stands for, in the engine's own flags."""
    option = params.option(drafter)
    if params.engine == "sglang":
        return " ".join(option.sglang_args())
    return "--speculative-config '" + json.dumps(option.vllm_speculative_config()) + "'"


def restart_flags(params: Eagle3Params, drafter: str, run_dir: str | Path) -> str:
    """The restart flags to show in a notebook that may be shared: the whole line goes to the run
    folder's ``restart-flags.txt`` (to copy from), the text returned has local paths shortened."""
    from speclab.urls import scrub_paths

    flags = launch_flags(params, drafter)
    (Path(run_dir) / "restart-flags.txt").write_text(flags + "\n")
    shown = scrub_paths(flags)
    return shown if shown == flags else f"{shown}  (paths shortened; the whole line is in the run's restart-flags.txt)"


def run_eagle3(params: Eagle3Params, run: Run, drafter: str, *, progress: bool = True) -> OptionOutcome:
    """Rerun exactly the baseline's prompts and sweep with the EAGLE-3 drafter on."""
    return repeat_baseline(params, run, params.option(drafter), "eagle3", progress=progress)


def baseline_token_rows(baseline: RunData, out_path: Path) -> Path:
    """The baseline's own prompts and greedy answers as token ids (one JSONL row per prompt)."""
    frame = baseline.requests
    needed = {"prompt_token_ids", "token_ids"}
    if frame.empty or not needed <= set(frame.columns):
        raise SpeclabError("The baseline run recorded no token ids; rerun 01-baseline on a server that returns them.")
    ok = frame[frame["ok"].astype(bool)].dropna(subset=list(needed)).drop_duplicates("prompt_id")
    rows = [{"id": r["prompt_id"], "category": r["category"], "prompt_token_ids": list(r["prompt_token_ids"]),
             "output_token_ids": list(r["token_ids"])} for r in ok.to_dict("records")]
    out_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out_path


def predict_offline(baseline: RunData, head_dir: str, run_dir: Path, k: int, *, progress: bool = True) -> pd.DataFrame:
    """Per category: per-position acceptance of the head run offline over the baseline's tokens."""
    from speclab.eagle3.train import evaluate_head

    rows = baseline_token_rows(baseline, run_dir / "offline-tokens.jsonl")
    result = evaluate_head(Path(head_dir), rows, run_dir / "offline-prediction.json", steps=k, progress=progress)
    return offline_table(result["samples"])


def offline_table(samples: list[dict[str, Any]]) -> pd.DataFrame:
    """Pool per-sample counts into per-category (and `all`) per-position rates."""
    frame = pd.DataFrame(samples)
    if frame.empty:
        return pd.DataFrame()
    k = len(frame["accepted_per_pos"].iloc[0])
    for i in range(k):
        frame[f"a{i}"] = frame["accepted_per_pos"].map(lambda v, i=i: v[i])
    out = []
    for category, group in [*frame.groupby("category"), ("all", frame)]:
        rows = int(group["rows"].sum())
        rates = [float(group[f"a{i}"].sum()) / rows if rows else float("nan") for i in range(k)]
        out.append({"category": category, "rows": rows, **{f"position_{i}_rate": r for i, r in enumerate(rates)},
                    "mean_acceptance_length": 1 + sum(rates)})
    return pd.DataFrame(out)


def offline_draft_step_s(run_dir: str | Path) -> dict[str, float]:
    """The head's drafting-step time per batch size, timed by the offline prediction."""
    record = json.loads((Path(run_dir) / "offline-prediction.json").read_text())
    return {str(b): float(t) for b, t in record["draft_step_s"].items()}


def measured_acceptance(spec: RunData) -> pd.DataFrame:
    """Per-position acceptance pooled over the run's levels from counter deltas (one row `all`):
    sum of accepted-at-position-i over sum of drafts, so busy levels weigh by their drafts."""
    levels = spec.levels
    if levels.empty or "server_counters" not in levels:
        return pd.DataFrame()
    drafts, accepted = 0, None
    for counters in levels["server_counters"]:
        per_pos = (counters or {}).get("d_accepted_per_position")
        if not counters or not counters.get("d_drafts") or not per_pos:
            continue
        drafts += int(counters["d_drafts"])
        accepted = list(per_pos) if accepted is None else [a + b for a, b in zip(accepted, per_pos, strict=False)]
    if not drafts or accepted is None:
        return pd.DataFrame()
    rates = [a / drafts for a in accepted]
    return pd.DataFrame([{"category": "all", "drafts": drafts, **{f"position_{i}_rate": r for i, r in enumerate(rates)},
                          "mean_acceptance_length": 1 + sum(rates)}])


def same_model(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two config.json dicts describe the same model shape (hidden, depth, vocabulary)."""
    keys = ("hidden_size", "num_hidden_layers", "vocab_size")
    ta, tb = text_config(a), text_config(b)
    return all(ta.get(k) == tb.get(k) for k in keys)


def plan_step_time(params: Eagle3Params, head: HeadShape, run_dir: Path, target_name: str) -> StepTime:
    """The plan's training step: the shipped H200 step scaled to `head` ('h200', or a named
    case), or one timed here for `head` ('measure': on a CPU its hours are CPU-hours here)."""
    if params.plan_step_time == "h200":
        return scaled_step_time(shipped_step_times(), head, tokens_per_sample=params.plan_tokens_per_sample,
                                target_name=target_name)
    if params.plan_step_time != "measure":
        return scaled_step_time(shipped_step_times(), head, case=params.plan_step_time, target_name=target_name)
    from speclab.eagle3.train import measure_step_time

    name = f"{target_name}-head"
    # a draft vocabulary and sequence a CPU times in minutes; the record says which
    case: dict[str, Any] = {"name": name, **head.model_dump(), "draft_vocab": min(head.draft_vocab, 32000),
                            "seq_len": 512, "batch": 1, "ttt_steps": 3, "repeats": 3}
    record = measure_step_time([case], run_dir / "step-time.json", progress=params.interactive)
    return step_time_from_record(record, name)


def baseline_decode_tokens_per_s(baseline: RunData) -> tuple[float, int]:
    """The served model's best measured generation rate: the highest level output tok/s of the
    baseline run, and that level's concurrency."""
    levels = baseline.levels
    if levels.empty or "output_tok_s" not in levels:
        raise SpeclabError("The baseline run has no level throughput to price answer generation; set plan_decode_tokens_per_s.")
    rates = levels.dropna(subset=["output_tok_s"])
    rates = rates[rates["output_tok_s"] > 0]
    if rates.empty:
        raise SpeclabError("The baseline run measured no output tok/s to price answer generation; set plan_decode_tokens_per_s.")
    best = rates.loc[rates["output_tok_s"].idxmax()]
    return float(best["output_tok_s"]), int(best["concurrency"])


def plan_throughput(params: Eagle3Params, baseline: RunData, *, for_served: bool, plan_name: str) -> Throughput:
    """The target's speed for data generation: given in params, or (when the plan is for the
    served model) measured by the baseline run; on the embedded server that speed is this
    machine's CPU, so its hours are CPU-hours, not priced."""
    given_prefill, given_decode = params.plan_prefill_tokens_per_s, params.plan_decode_tokens_per_s
    if not for_served and given_prefill is None:
        raise SpeclabError(f"Option D for {plan_name}, not the served model, needs that model's speed: set"
                           " plan_prefill_tokens_per_s (and plan_decode_tokens_per_s when answers are regenerated).")
    parts, measured = [], False
    prefill = given_prefill
    if prefill is None:
        prefill, measured = baseline_prefill_tokens_per_s(baseline), True
        parts.append(f"prefill {prefill:,.0f} tok/s (the baseline's prompt tokens / TTFT at its lowest concurrency,"
                     " a lower bound)")
    else:
        parts.append(f"prefill {prefill:,.0f} tok/s (plan_prefill_tokens_per_s)")
    decode = given_decode
    if decode is None and params.plan_answer_tokens_per_sample and for_served:
        decode, concurrency = baseline_decode_tokens_per_s(baseline)
        measured = True
        parts.append(f"decode {decode:,.0f} tok/s (the baseline's best level, concurrency {concurrency}; a batch job"
                     " at a higher concurrency generates faster)")
    elif decode is not None:
        parts.append(f"decode {decode:,.0f} tok/s (plan_decode_tokens_per_s)")
    on_cpu_here = measured and params.mode == "embedded"
    where = "the embedded server on this machine's CPU" if on_cpu_here else "the served model's server"
    source = (f"measured by the baseline run {run_id(baseline.path)} on {where}: " if measured else "") \
        + "; ".join(parts)
    return Throughput(prefill_tokens_per_s=prefill, decode_tokens_per_s=decode, on_gpu=not on_cpu_here,
                      gpus_per_replica=params.plan_gpus_per_replica, gpu_hour_usd=params.plan_gpu_hour_usd,
                      source=source)


def option_d_plan(params: Eagle3Params, run_dir: Path, baseline: RunData, *, target_config: dict[str, Any],
                  target_name: str, drafter_config: dict[str, Any] | None = None) -> tuple[Plan, Path]:
    """Option D's estimate for the plan's target (the served model unless `plan_target_config`),
    written as `next-steps-eagle.md`. The head takes the drafter's dimensions when the drafter
    is a head for that model, else the model's own."""
    config = _read_json(params.plan_target_config, "plan target config") if params.plan_target_config else target_config
    for_served = params.plan_target_config is None or same_model(config, target_config)
    name = target_name if for_served else Path(str(params.plan_target_config)).parent.name
    shape = TargetShape.from_config(config, name)
    head = HeadShape.for_target(config, draft_vocab=shape.vocab_size,
                                drafter_config=drafter_config if for_served else None)
    step = plan_step_time(params, head, run_dir, name)
    data = DataPlan(samples=params.plan_samples, tokens_per_sample=params.plan_tokens_per_sample,
                    epochs=params.plan_epochs, capture=params.plan_capture,
                    answer_tokens_per_sample=params.plan_answer_tokens_per_sample)
    throughput = plan_throughput(params, baseline, for_served=for_served, plan_name=name)
    plan = estimate_plan(shape, data, step, throughput)
    return plan, write_plan(run_dir, plan)


def baseline_prefill_tokens_per_s(baseline: RunData) -> float:
    """A lower bound on prefill speed from the baseline: prompt tokens / TTFT at concurrency 1."""
    frame = baseline.requests
    ok = frame[frame["ok"].astype(bool)]
    if "prompt_tokens" in ok and "concurrency" in ok:
        single = ok[ok["concurrency"] == ok["concurrency"].min()]
        ttft = single["ttft_s"].sum()
        if ttft > 0:
            return float(single["prompt_tokens"].sum() / ttft)
    raise SpeclabError("The baseline has no prompt tokens or TTFT to estimate prefill speed; set plan_prefill_tokens_per_s.")


def write_report_section(run_dir: str | Path, *, comparison: pd.DataFrame, predicted: pd.DataFrame | None,
                         measured: pd.DataFrame, plan: Plan, match: DrafterMatch,
                         drafter: str, speed_check: pd.DataFrame | None = None) -> Path:
    """05-report's view of this run: speedups, predicted vs measured acceptance, the plan."""
    from speclab.sections import write_section

    summary = [f"EAGLE-3 drafter {Path(drafter).name} against the baseline's prompts."]
    if not measured.empty:
        row = measured.iloc[0]
        summary.append(f"Measured mean acceptance length {row['mean_acceptance_length']:.2f}"
                       f" (position 0: {row['position_0_rate']:.0%}).")
    if predicted is not None and not predicted.empty:
        row = predicted[predicted["category"] == "all"].iloc[0]
        summary.append(f"Predicted offline before the restart: {row['mean_acceptance_length']:.2f}"
                       f" (position 0: {row['position_0_rate']:.0%}).")
    if not comparison.empty and "verdict" in comparison:
        counts = comparison["verdict"].value_counts().to_dict()
        summary.append("Paired verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())) + ".")
    summary.append(plan.headline())
    plan_table = plan.table()[["quantity", "reads"]].rename(columns={"reads": "estimate"})
    tables = {"speedup": comparison, "acceptance-measured": measured, "plan": plan_table}
    if predicted is not None:
        tables["acceptance-predicted"] = predicted
    if speed_check is not None and not speed_check.empty:
        tables["speedup-predicted-vs-measured"] = speed_check
    return write_section(run_dir, kind="03-eagle3-drafter", title="EAGLE-3 drafter", summary=summary,
                         tables={k: v for k, v in tables.items() if v is not None and not v.empty},
                         notes=match.warnings)


def predict_speedups(baseline_dir: str | Path, predicted: pd.DataFrame, k: int,
                     draft_step_s: dict[str, float]) -> pd.DataFrame:
    """Predicted tok/s and speedup per category x concurrency before the restart.

    Acceptance from the offline replay (tokens per step = its mean acceptance length), the
    verify step from the baseline's calibrated step-time model (`cost_model.json`), and the
    drafter's k forward passes per step from `draft_step_s` (the head's compute timed
    offline, interpolated in the batch size; the engine's per-step overhead is not in it).
    """
    import numpy as np

    from speclab.predict.costmodel import predict_speedup
    from speclab.predict.stepmodel import load_cost_model
    from speclab.predict.timings import level_timings

    model = load_cost_model(baseline_dir)
    if model is None:
        raise SpeclabError("The baseline run has no cost_model.json; rerun 01-baseline (it calibrates the verify cost).")
    sizes = sorted((int(b), float(t)) for b, t in draft_step_s.items())
    xs, ys = np.array([b for b, _ in sizes], dtype=float), np.array([t for _, t in sizes])
    levels = level_timings(baseline_dir)[["concurrency", "batch"]].drop_duplicates("concurrency")
    rows = []
    for row in predicted.to_dict("records"):
        for level in levels.to_dict("records"):
            batch = float(level["batch"])
            draft_s = k * float(np.interp(batch, xs, ys))
            out = predict_speedup(model, batch, float(row["mean_acceptance_length"]), 1.0 + k, draft_s=draft_s)
            rows.append({"category": row["category"], "concurrency": int(level["concurrency"]),
                         "predicted_acceptance_length": float(row["mean_acceptance_length"]),
                         "draft_ms_per_step": draft_s * 1e3, "predicted_tok_s": out["spec_tok_s"],
                         "predicted_speedup": out["speedup"]})
    return pd.DataFrame(rows)


def predicted_vs_measured_speedup(predicted: pd.DataFrame, comparison: pd.DataFrame) -> pd.DataFrame:
    """Predicted speedup beside the paired measurement, per category x concurrency."""
    if predicted.empty or comparison.empty:
        return pd.DataFrame()
    measured = comparison[["category", "concurrency", "speedup", "ci_low", "ci_high", "verdict"]].rename(
        columns={"speedup": "measured_speedup"})
    both = predicted.merge(measured, on=["category", "concurrency"], how="inner")
    both["error_pct"] = 100 * (both["predicted_speedup"] / both["measured_speedup"] - 1)
    return both
