"""What the notebooks call: one function per notebook step, so notebooks stay thin."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from speclab.errors import SpeclabError
from speclab.measure.identity import ServerIdentity
from speclab.measure.loadgen import SweepResult, check_before_sweep, measure_sweep
from speclab.options import SpecOption, default_option
from speclab.params import BaselineParams, Eagle3Params, ProfileNotebookParams, SpecParams, _NotebookParams
from speclab.predict.costmodel import CalibratedStepTime
from speclab.profiling import ProfileParams, ProfileReport, analyse_profile
from speclab.profiling.capture import CaptureResult, capture_profile
from speclab.prompts import Prompt
from speclab.report.tables import COST_MODEL_JSON, PREDICTIONS_PARQUET, load_cost_model
from speclab.runfolder import Plan, RunData, latest_run, load_run
from speclab.runs import Run, write_json
from speclab.serve.target import serve_target
from speclab.sweep import SweepConfig


def start_run(params: _NotebookParams, kind: str) -> Run:
    """The run folder for this notebook execution; the manifest is written at once."""
    return Run.create(kind, params.model_dump(mode="json"), kind=kind,
                      run_dir=params.run_dir, outputs_root=params.outputs_root)


class SweepOutcome(NamedTuple):
    """What a sweep notebook measured: the sweep and the server that answered it."""

    sweep: SweepResult
    identity: ServerIdentity


class OptionOutcome(NamedTuple):
    """What an option notebook (02, 03) measured, and the baseline run it repeated."""

    sweep: SweepResult
    identity: ServerIdentity
    baseline_dir: Path


def check_baseline_inputs(params: BaselineParams) -> Plan:
    """01-baseline's inputs checked without a server: the key variable, limits, the prompt
    plan, and (``verify_cost: calibrate``) the calibration prompts. Returns the plan."""
    plan = check_before_sweep(params.sweep_only())
    if params.verify_cost == "calibrate":  # its prompts are checked now, not after the sweep
        from speclab.predict.calibration import calibration_prompts

        calibration_prompts(params.prompts, params.categories, set(plan.prompts))
    return plan


def check_notebook_inputs(params: _NotebookParams) -> None:
    """What ``speclab run`` checks before it makes a run folder (one sentence on failure):
    01's prompts and limits, the API key variable, and that 02/03 have a baseline to repeat."""
    from speclab.auth import auth_headers

    auth_headers(getattr(params, "api_key_env", None))
    if isinstance(params, BaselineParams):
        check_baseline_inputs(params)
    elif isinstance(params, (SpecParams, Eagle3Params)):
        resolve_baseline(params.baseline_run, params.outputs_root)
    learn = getattr(params, "spec_mode_overhead_from", None)
    if learn:
        from speclab.predict.ownsteps import require_spec_run

        require_spec_run(learn)


def run_baseline(params: BaselineParams, run: Run, *, progress: bool = True) -> SweepOutcome:
    """Start/reach the server with speculation off and sweep it; data lands in the run folder."""
    target = params.target(SpecOption())
    config = params.sweep_only()
    plan = check_baseline_inputs(params)  # bad prompts or limits stop before the server starts
    with serve_target(target, run) as live:
        result = measure_sweep(live.endpoint, live.model, config, run, plan=plan, arm="baseline",
                               progress=progress)
        if params.verify_cost == "probe":
            try:
                measure_probe(live, params, run, progress=progress)
            except SpeclabError as exc:  # the baseline above is measured and kept whatever happens here
                print(f"speclab: the verify-cost probe failed ({exc.message}); the prediction falls back to "
                      "the baseline's slope and says so.")
                write_json(run.path / "probe.json", {"failed": exc.message})
        if params.verify_cost == "calibrate":
            # The calibration's baseline arm on this same server: one start fewer (25-35 s
            # on 2 cores), and the verify cost is read against the instance measured here.
            from speclab.predict.calibration import measure_calibration_baseline

            cal_config, pool, said = _calibration_inputs(params, set(plan.prompts))
            print(f"speclab: {said}; its baseline arm runs on this server now")
            try:
                measure_calibration_baseline(live, target, cal_config, prompts=pool,
                                             split_concurrency=[min(cal_config.concurrency)],
                                             outputs_root=run.path / "calibration", progress=progress)
            except SpeclabError as exc:  # the baseline above is measured and kept whatever happens here
                print(f"speclab: the calibration's baseline arm failed ({exc.message}); "
                      "verify_cost_model measures it again on a fresh server.")
        if params.self_check_requests and "float32" not in str(live.identity.dtype or params.dtype):
            try:
                measure_self_divergence(live, params, run, plan, progress=progress)
            except SpeclabError as exc:  # measured data stays; the losslessness check says it has no rerun
                print(f"speclab: the baseline's self-check rerun failed ({exc.message}); 02's losslessness "
                      "check will say it cannot tell bf16 rounding from a broken server.")
        return SweepOutcome(result, live.identity)


def _target_config(given: str | None, live: Any) -> tuple[dict[str, Any] | None, str]:
    """The served model's config.json for the LM head's share, and where it came from: the
    ``target_config`` given, else the model folder the server reports when it is on this machine."""
    import json

    candidates = [given] if given else [
        str(Path(m.root) / "config.json") for m in live.identity.models if getattr(m, "root", None)]
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


def probe_lengths(params: BaselineParams) -> int:
    """Tokens per sequence the probe goes up to: k + 1 of the largest k predicted."""
    ks = [params.predict_k if m == "ngram" else params.predict_suffix_k for m in params.predict_methods]
    return max(ks) + 1


def measure_probe(live: Any, params: BaselineParams, run: Run, *, progress: bool = False) -> dict[str, Any]:
    """01-baseline's live verify-cost probe (:func:`probe_live`) at every concurrency of its plan."""
    summary = probe_live(live, run.path, batches=sorted(set(params.concurrency)), n_max=probe_lengths(params),
                         api_key_env=params.api_key_env, target_config=params.target_config, progress=progress)
    run.update(probe={k: v for k, v in summary.items() if k != "target_config_json"})
    return summary


def probe_live(live: Any, run_dir: Path, *, batches: Sequence[int], n_max: int, api_key_env: str | None = None,
               target_config: str | None = None, progress: bool = False) -> dict[str, Any]:
    """The live verify-cost probe (:mod:`speclab.measure.probe`) on a baseline's own server, over
    cached prefixes of the sequences that baseline run (``run_dir``) recorded: points appended to
    probe.jsonl as measured, a summary in probe.json. Raises one sentence when no point is usable."""
    import httpx

    from speclab.auth import auth_headers, basic_auth_headers
    from speclab.measure.metrics import scrape_metrics
    from speclab.measure.probe import (
        PROBE_JSONL,
        PROBE_REPEATS,
        append_point,
        cache_layout,
        head_rows,
        probe_sequences,
        refuse_without_prefix_cache,
        run_probe,
    )
    from speclab.runfolder import read_records

    endpoint = live.endpoint
    headers = auth_headers(api_key_env) or basic_auth_headers(endpoint)
    with httpx.Client(timeout=httpx.Timeout(30.0), headers=headers) as client:
        layout = cache_layout(client, endpoint.without_credentials(), live.identity.engine,
                              scrape_metrics(client, endpoint.without_credentials()))
    refuse_without_prefix_cache(layout)
    sequences = probe_sequences(read_records(run_dir), layout.block_size, n_max)
    max_len = next((m.max_model_len for m in live.identity.models if getattr(m, "max_model_len", None)), 2048)
    config, config_from = _target_config(target_config, live)
    from speclab.measure import progress as bars

    # the LM head's rows (vLLM: prompt_logprobs); SGLang's head is priced from the config
    rows = head_rows(batches, n_max, int(max_len)) if layout.engine == "vllm" else []
    started = time.perf_counter()
    with bars.bar(total=(len(batches) * n_max + len(rows)) * PROBE_REPEATS, desc="verify-cost probe",
                  unit="point", show=progress) as bar:
        probe = run_probe(endpoint.without_credentials(), live.model, sequences, batches, n_max, layout,
                          max_model_len=int(max_len), api_key_env=api_key_env,
                          on_point=lambda point: append_point(run_dir / PROBE_JSONL, point),
                          progress=lambda done: bar.update(1))
        head = measure_head(live, run_dir, sequences, rows, api_key_env, lambda done: bar.update(1))
    summary = {"engine": layout.engine, "block_size": layout.block_size, "layout_from": layout.source,
               "batches": list(batches), "tokens_max": n_max, "repeats": PROBE_REPEATS,
               "points": len(probe.points), "usable": len(probe.usable()), "refusals": probe.refusals(),
               **head, "sequences": len(sequences), "target_config_from": config_from, "target_config_json": config,
               "elapsed_s": round(time.perf_counter() - started, 1)}
    write_json(run_dir / "probe.json", summary)
    if not probe.usable():
        raise SpeclabError("every probe point was refused: " + "; ".join(probe.refusals()))
    return summary


def measure_head(live: Any, run_dir: Path, sequences: Sequence[Any], rows: Sequence[int],
                 api_key_env: str | None = None, progress: Any = None) -> dict[str, Any]:
    """The head probe (:func:`speclab.measure.probe.run_head_probe`) over the probe's own real
    tokens, pairs appended to probe-head.jsonl as measured; its summary fields for probe.json.
    No rows (SGLang): nothing is measured and the summary says the config prices the head."""
    from speclab.measure.probe import HEAD_JSONL, append_point, run_head_probe

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


def measure_self_divergence(live: Any, params: BaselineParams, run: Run, plan: Plan, *,
                            progress: bool = False) -> dict[str, Any]:
    """01-baseline's self-check (:func:`self_check`), recorded in its manifest."""
    record = self_check(live, run.path, plan, params, params.self_check_requests,
                        dtype=params.dtype, progress=progress)
    run.update(self_divergence=record)
    return record


def self_check(live: Any, run_dir: Path, plan: Plan, config: SweepConfig, requests: int, *,
               dtype: str | None = None, progress: bool = False) -> dict[str, Any]:
    """How often a baseline's greedy outputs differ from themselves: the first ``requests`` of
    its top level rerun on the same server at half its concurrency (another batch shape, as
    speculation makes), compared token by token. In bf16 this is the noise a speculative arm's
    divergence is judged against, and the share of answers whose replayed acceptance a
    prediction cannot take as known; saved as self_divergence.json in ``run_dir``."""
    from speclab.predict.compare import losslessness, self_divergence
    from speclab.report.tables import SELF_DIVERGENCE_JSON
    from speclab.runfolder import PlannedRequest
    from speclab.runs import run_id

    top = max(plan.levels(), key=lambda level: (level[1], level[0]))
    chosen = plan.for_level(top[0])[:requests]
    rerun_c = max(1, top[1] // 2)
    subplan = Plan([PlannedRequest(**{**r.__dict__, "level": 0, "concurrency": rerun_c}) for r in chosen],
                   {r.prompt_id: plan.prompts[r.prompt_id] for r in chosen})
    config = config.sweep_only().model_copy(update={"concurrency": [rerun_c], "warmup_requests": 0})
    sub = Run.create("self-check", {"of": run_id(run_dir), "concurrency": rerun_c}, kind="self-check",
                     run_dir=run_dir / "self-check")
    with sub.recording():
        measure_sweep(live.endpoint, live.model, config, sub, plan=subplan, arm="self-check", progress=progress)
    base = load_run(run_dir).requests
    base = base[base["level"] == top[0]].assign(concurrency=0, repeat=0)
    again = load_run(sub.path).requests.assign(concurrency=0, repeat=0)
    table = losslessness(base, again)
    record = {**self_divergence(table), "from_concurrency": top[1], "rerun_concurrency": rerun_c,
              "dtype": live.identity.dtype or dtype, "run": sub.id}
    write_json(run_dir / SELF_DIVERGENCE_JSON, record)
    return record


def _calibration_inputs(params: BaselineParams, used: set[str]) -> tuple[SweepConfig, list[Prompt], str]:
    """The verify-cost calibration's sweep, its prompts (none the baseline used) and the
    sentence saying which they are."""
    from speclab.predict.calibration import calibration_prompts

    pool, said = calibration_prompts(params.prompts, params.categories, used)
    # The pool is passed in: its own categories, not the baseline's, choose the plan.
    config = params.sweep_only().model_copy(update={
        "per_category": params.calibration_per_category, "warmup_requests": 1, "repeats": 1,
        "prompts": None, "categories": None})
    return config, pool, said


def resolve_baseline(baseline_run: str | None, outputs_root: str | None) -> Path:
    """The baseline run folder to compare against (the latest finished 01-baseline if None)."""
    if baseline_run:
        path = Path(baseline_run)
        if not (path / "plan.json").exists():
            raise SpeclabError(f"{path} is not a finished 01-baseline run (no plan.json); check baseline_run.")
        return path
    return latest_run("01-baseline", outputs_root)


def repeat_baseline(params: SpecParams | Eagle3Params, run: Run, option: SpecOption, method: str, *,
                    progress: bool = True) -> OptionOutcome:
    """Rerun exactly a baseline's prompts and sweep with ``option`` on (02-ngram, 03-eagle3-drafter)."""
    baseline_dir = resolve_baseline(params.baseline_run, params.outputs_root)
    baseline_params = BaselineParams.validate_values(
        {k: v for k, v in (load_run(baseline_dir).manifest.get("params") or {}).items()
         if k in BaselineParams.model_fields})
    plan = Plan.load(baseline_dir)
    config = baseline_params.sweep_only().model_copy(update={"api_key_env": params.api_key_env})
    dtype = params.dtype if params.dtype else baseline_params.dtype
    target = params.model_copy(update={"dtype": dtype}).target(option)
    run.update(baseline_run=str(baseline_dir), method=method, option=option.model_dump(mode="json"))
    check_before_sweep(config, plan)
    with serve_target(target, run) as live:
        result = measure_sweep(live.endpoint, live.model, config, run, plan=plan, arm=method, progress=progress)
        return OptionOutcome(result, live.identity, baseline_dir)


def run_speculative(params: SpecParams, run: Run, *, progress: bool = True) -> OptionOutcome:
    """Rerun exactly the baseline's prompts and sweep with n-gram or suffix on."""
    return repeat_baseline(params, run, params.option(), params.method, progress=progress)


def levels_table(run: RunData) -> pd.DataFrame:
    """One row per level with the summary.json contract keys most readers want."""
    if run.levels.empty:
        return pd.DataFrame()
    cols = ["arm", "concurrency", "rate", "repeat", "requests", "inflight_mean", "errors", "output_tokens",
            "duration_s", "output_tok_s", "ttft_s_median", "ttft_s_p99", "tpot_s_median",
            "tpot_s_p99", "e2e_s_median", "tokens_per_chunk_mean", "acceptance_rate",
            "mean_acceptance_length", "server_tpot_s_mean", "server_ttft_s_mean", "foreign_traffic"]
    from speclab.report.tables import mark_load

    return mark_load(run.levels[[c for c in cols if c in run.levels]], [run])


def acceptance_table(run: RunData) -> pd.DataFrame:
    """Per level: acceptance rate, mean acceptance length and per-position rates (counter deltas)."""
    if run.levels.empty:
        return pd.DataFrame()
    rows = []
    for level in run.levels.to_dict("records"):
        row = {"concurrency": level.get("concurrency"), "repeat": level.get("repeat"),
               "acceptance_rate": level.get("acceptance_rate"),
               "mean_acceptance_length": level.get("mean_acceptance_length"),
               "tokens_per_chunk_mean": level.get("tokens_per_chunk_mean")}
        for i, rate in enumerate(level.get("per_position_acceptance") or []):
            row[f"position_{i}_rate"] = rate
        rows.append(row)
    return pd.DataFrame(rows)


def verify_cost_model(params: BaselineParams, run: Run, *, progress: bool = False) -> CalibratedStepTime:
    """The step-time model behind every prediction, as ``params.verify_cost`` says.

    ``probe`` (the default, any server): the cost of verifying n tokens timed live on the
    baseline's own server by prefix-cached extensions (:func:`measure_probe`, run by
    :func:`run_baseline`), plus the LM head's rows (measured, or its config share); ``calibrate`` (embedded): a real n-gram
    run on prompts this baseline did not use (plus its own baseline on the same plan);
    ``baseline_slope``: the baseline's own marginal cost of a token in a step stands in
    (no restart needed, an estimate); ``explicit``: the numbers you give. Saved to
    cost_model.json so 02-ngram and 05-report predict with the same model.
    """
    from speclab.predict.calibration import finished_calibration_baseline, measure_verify_cost
    from speclab.predict.costmodel import VerifyCost
    from speclab.serve.embedded import embedded_option

    record: dict[str, Any] = {"source": params.verify_cost}
    if params.verify_cost == "calibrate":
        used = set(Plan.load(run.path).prompts)  # calibrate on prompts the baseline did not use
        config, pool, said = _calibration_inputs(params, used)
        record["calibration_prompts"] = said
        # run_baseline swept the baseline arm on its own server; only a run that lacks
        # it (an interrupted one, or a caller that skipped run_baseline) measures it here.
        baseline_arm = finished_calibration_baseline(run.path / "calibration")
        if baseline_arm is None:
            print(f"speclab: {said}")
        target = params.target(embedded_option("ngram"))
        # one category per level at the lowest concurrency (a spread of draft tokens per
        # step), mixed levels above it (full batches at the sizes predicted): the plan
        # make bench-predictor validates (docs/predictor.md)
        calibration = measure_verify_cost(target, config, prompts=pool, baseline_run=baseline_arm,
                                          split_concurrency=[min(config.concurrency)],
                                          progress=progress, outputs_root=run.path / "calibration")
        record.update(calibration_baseline_run=str(calibration.baseline_run),
                      calibration_spec_run=str(calibration.spec_run))
    elif params.verify_cost == "explicit":
        record["verify"] = VerifyCost(overhead_s=params.verify_overhead_s,
                                      per_token_s=params.verify_per_token_s or 0.0,
                                      exponent=params.verify_exponent, source="params").model_dump()
        record["verify_cost_sd"] = params.verify_cost_sd
    elif params.verify_cost == "probe":
        from speclab.runs import read_json

        probe = read_json(run.path / "probe.json") if (run.path / "probe.json").exists() else {
            "failed": "it did not run"}
        if probe.get("failed"):
            record["probe_failed"] = probe["failed"]
        else:
            record["target_config_json"] = probe.get("target_config_json")
            record["probe"] = {k: v for k, v in probe.items() if k != "target_config_json"}
    if params.verify_cost != "calibrate":  # calibrate measures it; every other source states a range
        record["spec_mode_overhead_ms"] = list(params.spec_mode_overhead_ms)

    write_json(run.path / COST_MODEL_JSON, record)
    model = load_cost_model(run.path)
    if model is None:  # written just above; only a vanished run folder gets here
        raise SpeclabError(f"{run.path / COST_MODEL_JSON} could not be read back; check the run folder.")
    record["model"] = model.describe()
    write_json(run.path / COST_MODEL_JSON, record)
    return model


def prediction_options(methods: Sequence[str], ngram_k: int, suffix_k: int) -> list[SpecOption]:
    """The options 01-baseline predicts (the embedded defaults' lookup bounds for n-gram)."""
    options = []
    for method in methods:
        if method == "ngram":
            options.append(default_option("ngram", ngram_k))
        else:
            options.append(default_option(method, suffix_k))
    return options


def predictions_for_baseline(data: RunData, params: BaselineParams, model: CalibratedStepTime) -> pd.DataFrame:
    """Predicted acceptance, tok/s and speedup per option x category x concurrency; saved."""
    from speclab.predict.predictions import predict_from_baseline

    frames = [predict_from_baseline(data.path, option, model, instance_sd=params.instance_sd)
              for option in prediction_options(params.predict_methods, params.predict_k,
                                               params.predict_suffix_k)]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not table.empty:
        table.to_parquet(data.path / PREDICTIONS_PARQUET, index=False)
    return table


def restart_seconds(params: BaselineParams, data: RunData) -> tuple[float | None, str]:
    """What one restart costs, and where that figure comes from: ``restart_minutes`` when
    given, else the load time measured when speclab started this run's server."""
    if params.restart_minutes is not None:
        return params.restart_minutes * 60.0, "restart_minutes (given)"
    measured = data.server.get("load_time_s")
    if measured:
        return float(measured), "measured when speclab started this server"
    return None, "unknown"


def prediction_parts(params: BaselineParams, predicted: pd.DataFrame) -> pd.DataFrame:
    """Where 01 was given a 00-profile run of this server: each option's predicted speedup per
    concurrency as parts (tokens per step from acceptance, then each bucket's extra time, then
    speculative mode's own cost), every part labelled measured, fitted, borrowed or assumed
    (:func:`speclab.predict.stepparts.decompose_speedup`). Empty without a profile run."""
    if not params.profile_run or predicted.empty:
        return pd.DataFrame()
    from speclab.predict import stepparts

    summary, scaling = stepparts.profile_tables(params.profile_run)
    profiled = Run.open(Path(params.profile_run)).manifest.get("params") or {}
    moe = "moe" in set(summary.get("bucket", pd.Series(dtype=str)).astype(str))
    forms = stepparts.fit_part_forms(stepparts.load_gpu_step(), "moe-30b-a3b" if moe else "dense-8b")
    low, high = params.spec_mode_overhead_ms
    model = stepparts.profile_parts_model(
        summary, scaling, speculative_profile=profiled.get("option", "baseline") != "baseline",
        attention_draft_factor=stepparts.attention_draft_factor(forms), spec_overhead_ms=(low, high),
        spec_overhead_source="spec_mode_overhead_ms (docs/predictor.md, 'Without a restart')")
    frames = []
    for row in predicted[predicted["category"] == "all"].to_dict("records"):
        frames.append(stepparts.decompose_speedup(
            model, [row["concurrency"]], tokens_per_step=max(float(row["tokens_per_step"]), 1.0),
            verified_tokens_per_seq=max(float(row["verified_tokens_per_seq"]), 1.0), acceptance_label="measured",
            acceptance_source="replayed over this baseline's greedy outputs").assign(option=row["option"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def payback_table(data: RunData, params: BaselineParams, predicted: pd.DataFrame) -> pd.DataFrame:
    """Hours until a restart into each option pays for itself, for the expected traffic; where
    no restart cost is known (an external server speclab did not start), one row saying what to give."""
    from speclab.predict.predictions import restart_payback

    restart_s, source = restart_seconds(params, data)
    if restart_s is None:
        return pd.DataFrame({"note": [
            "No restart cost is known: speclab did not start this server, so it could not time a start. "
            "Give restart_minutes (how long a restart takes your server away) to see the payback."]})
    frames = []
    for option, rows in predicted.groupby("option", sort=False):
        table = restart_payback(rows, params.traffic, load_time_s=restart_s)
        frames.append(table.assign(option=option, restart_from=source))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


class ProfileOutcome(NamedTuple):
    """What 00-profile measured: the capture (None for given traces), the analysis, the server."""

    capture: CaptureResult | None
    report: ProfileReport
    identity: ServerIdentity | None


def run_profile(params: ProfileNotebookParams, run: Run) -> ProfileOutcome:
    """Capture a profile under steady decode (or take given traces) and analyse it."""
    profile_params = ProfileParams(**({"buckets": params.buckets} if params.buckets else {}))
    if params.traces:
        report = analyse_profile(params.traces, profile_params)
        report.save(run.path)
        return ProfileOutcome(None, report, None)
    target = params.target(params.option_spec())
    if params.mode == "embedded":
        target = target.model_copy(update={"profiler_dir": str((run.path / "profiler-raw").resolve())})
    with serve_target(target, run) as live:
        capture = capture_profile(
            live, run, window_s=params.window_s, concurrency=params.concurrency,
            max_tokens=params.max_tokens, rounds=params.rounds, trace_dir=params.trace_dir,
            expect_traces=params.expect_traces)
        identity = live.identity
    report = analyse_profile(capture.traces, profile_params)
    report.save(run.path)
    return ProfileOutcome(capture, report, identity)
