"""What the notebooks call: one function per notebook step, so notebooks stay thin."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from speclab.errors import SpeclabError
from speclab.measure.calibration import CalibrationPrompts, calibration_prompts
from speclab.measure.loadgen import SweepResult, check_before_sweep, measure_sweep
from speclab.options import NGRAM_METHODS, SpecOption, default_option
from speclab.params import BaselineParams, Eagle3Params, ProfileNotebookParams, SpecParams, _NotebookParams
from speclab.predict.costmodel import CalibratedStepTime
from speclab.profiling import ProfileParams, ProfileReport, analyse_profile
from speclab.profiling.capture import CaptureResult, capture_profile
from speclab.runfolder import (
    CALIBRATION_DIR,
    COST_MODEL_JSON,
    PLAN_JSON,
    PREDICTIONS_PARQUET,
    PROBE_JSON,
    RECOMMENDED_CONFIG_JSON,
    SELF_DIVERGENCE_JSON,
    Plan,
    RunData,
    ServerIdentity,
    latest_run,
    load_run,
)
from speclab.runs import Run, read_json, run_id, write_json
from speclab.serve.target import LiveServer, serve_target
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
        from speclab.measure.calibration import calibration_prompts

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
    if isinstance(params, Eagle3Params):
        from speclab.eagle3.plan import check_step_time_choice

        check_step_time_choice(params.plan_step_time)
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
            measure_probe(live, params, run, progress=progress)
        if params.verify_cost == "calibrate":
            # The calibration's baseline arm on this same server: one start fewer (25-35 s
            # on 2 cores), and the verify cost is read against the instance measured here.
            from speclab.measure.calibration import measure_calibration_baseline

            cal_config, chosen = _calibration_inputs(params, set(plan.prompts))
            print(f"speclab: {chosen.said}; its baseline arm runs on this server now")
            try:
                measure_calibration_baseline(live, target, cal_config, prompts=chosen.prompts,
                                             split_concurrency=[min(cal_config.concurrency)],
                                             outputs_root=run.path / CALIBRATION_DIR, progress=progress)
            except SpeclabError as exc:  # the baseline above is measured and kept whatever happens here
                print(f"speclab: the calibration's baseline arm failed ({exc.message}); "
                      "verify_cost_model measures it again on a fresh server.")
        if params.self_check_requests and "float32" not in str(live.identity.dtype or params.dtype):
            try:
                record = self_check(live, run.path, plan, params, params.self_check_requests, dtype=params.dtype,
                                    progress=progress)
                run.update(self_divergence=record)
            except SpeclabError as exc:  # measured data stays; the losslessness check says it has no rerun
                print(f"speclab: the baseline's self-check rerun failed ({exc.message}); 02's losslessness "
                      "check will say it cannot tell bf16 rounding from a broken server.")
        return SweepOutcome(result, live.identity)


def _calibration_inputs(params: BaselineParams, used: set[str]) -> tuple[SweepConfig, CalibrationPrompts]:
    """The verify-cost calibration's sweep, its prompts (none the baseline used) and the
    sentence saying which they are."""
    chosen = calibration_prompts(params.prompts, params.categories, used)
    # The pool is passed in: its own categories, not the baseline's, choose the plan.
    config = params.sweep_only().model_copy(update={
        "per_category": params.calibration_per_category, "warmup_requests": 1, "repeats": 1,
        "prompts": None, "categories": None})
    return config, chosen


def resolve_baseline(baseline_run: str | None, outputs_root: str | None) -> Path:
    """The baseline run folder to compare against (the latest finished 01-baseline if None)."""
    if baseline_run:
        path = Path(baseline_run)
        if not (path / PLAN_JSON).exists():
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


def measure_probe(live: LiveServer, params: BaselineParams, run: Run, *, progress: bool = False) -> dict[str, Any]:
    """01-baseline's live verify-cost probe (:func:`speclab.measure.probe.probe_live`) at every
    concurrency of its plan, up to k + 1 tokens of the largest k predicted; its summary goes in
    the manifest. A probe that fails leaves its reason in probe.json: the baseline measured
    above is kept, and the prediction falls back to the baseline's slope and says so."""
    from speclab.measure import probe

    ks = [params.predict_k if m in NGRAM_METHODS else params.predict_suffix_k for m in params.predict_methods]
    try:
        summary = probe.probe_live(live, run.path, batches=sorted(set(params.concurrency)), n_max=max(ks) + 1,
                                   api_key_env=params.api_key_env, target_config_path=params.target_config,
                                   progress=progress, budget_s=params.probe_budget_s)
    except SpeclabError as exc:
        print(f"speclab: the verify-cost probe failed ({exc.message}); the prediction falls back to "
              "the baseline's slope and says so.")
        probe.record_probe_failure(run.path, exc.message)
        return {"failed": exc.message}
    run.update(probe={k: v for k, v in summary.items() if k != "target_config_json"})
    return summary


def self_check(live: LiveServer, run_dir: Path, plan: Plan, config: SweepConfig, requests: int, *,
               dtype: str | None = None, progress: bool = False) -> dict[str, Any]:
    """How often a baseline's greedy outputs differ from themselves: its top level partly rerun
    on the same server (:func:`speclab.measure.selfcheck.rerun_top_level`) and compared token by
    token (:func:`speclab.predict.compare.rerun_divergence`). In bf16 this is the noise a
    speculative arm's divergence is judged against, and the share of answers whose replayed
    acceptance a prediction cannot take as known; saved as self_divergence.json in ``run_dir``."""
    from speclab.measure.selfcheck import rerun_top_level
    from speclab.predict.compare import rerun_divergence

    rerun = rerun_top_level(live, run_dir, plan, config, requests, progress=progress)
    record = {**rerun_divergence(run_dir, rerun.path, rerun.top_level), "from_concurrency": rerun.from_concurrency,
              "rerun_concurrency": rerun.rerun_concurrency, "dtype": live.identity.dtype or dtype,
              "run": run_id(rerun.path)}
    write_json(run_dir / SELF_DIVERGENCE_JSON, record)
    return record


def verify_cost_model(params: BaselineParams, run: Run, *, progress: bool = False) -> CalibratedStepTime:
    """The step-time model behind every prediction, as ``params.verify_cost`` says
    (:mod:`speclab.predict.stepmodel` builds it), recorded once in cost_model.json so 02-ngram
    and 05-report predict with the same model.

    ``probe`` (the default, any server): the cost of verifying n tokens timed live on the
    baseline's own server (:func:`measure_probe`, run by :func:`run_baseline`); ``calibrate``
    (embedded): a real n-gram run on prompts this baseline did not use (plus its own baseline on
    the same plan); ``baseline_slope``: the baseline's own marginal cost of a sequence in a step
    stands in (no restart needed, an estimate); ``explicit``: the numbers you give.
    """
    from speclab.predict import stepmodel
    from speclab.predict.costmodel import VerifyCost

    record: dict[str, Any] = {"source": params.verify_cost}
    if params.verify_cost == "calibrate":
        record.update(measure_calibration(params, run, progress=progress))
    elif params.verify_cost == "explicit":
        record["verify"] = VerifyCost(overhead_s=params.verify_overhead_s,
                                      per_token_s=params.verify_per_token_s or 0.0,
                                      exponent=params.verify_exponent, source="params").model_dump()
        record["verify_cost_sd"] = params.verify_cost_sd
    elif params.verify_cost == "probe":
        probe = read_json(run.path / PROBE_JSON) if (run.path / PROBE_JSON).exists() else {"failed": "it did not run"}
        if probe.get("failed"):
            record["probe_failed"] = probe["failed"]
        else:
            record["target_config_json"] = probe.get("target_config_json")
            record["probe"] = {k: v for k, v in probe.items() if k != "target_config_json"}
    if params.verify_cost != "calibrate":  # calibrate measures it; every other source prices it
        record.update(mode_cost_inputs(params, run))
    record.update(instance_sd_record(params, run))
    model = stepmodel.model_from_record(record, run.path)
    record["model"] = model.describe()
    write_json(run.path / COST_MODEL_JSON, record)
    return model


def mode_cost_inputs(params: BaselineParams, run: Run) -> dict[str, Any]:
    """What cost_model.json needs to price speculative mode's own cost: the range given
    (``spec_mode_overhead_ms``), else the options to price in parts, with each option's proposer
    timed now on this baseline's sequences (:func:`speclab.measure.proposer.time_proposers`)."""
    if params.spec_mode_overhead_ms is not None:
        return {"spec_mode_overhead_ms": list(params.spec_mode_overhead_ms)}
    from speclab.measure.proposer import time_proposers
    from speclab.urls import Endpoint, is_local_host

    engine = load_run(run.path).server.get("engine")
    options = {o.method: int(o.num_speculative_tokens or 1)
               for o in prediction_options(search_methods(params, engine), params.predict_k, params.predict_suffix_k)}
    local = params.mode == "embedded" or (params.endpoint is not None and is_local_host(Endpoint.parse(params.endpoint).host))
    cpu_proposers = [m for m in options if m in ("ngram", "suffix")]  # ngram_gpu's runs on the GPU
    time_proposers(run.path, cpu_proposers, sorted({options[m] for m in cpu_proposers}), sorted(set(params.concurrency)),
                   server_local=local)
    return {"mode_cost_for": options}


def instance_sd_record(params: BaselineParams, run: Run) -> dict[str, Any]:
    """One server instance's speed spread for the prediction intervals, and its source: the
    value given, else the A/A spread measured for this host class and dtype (embedded), else
    speclab's cited default (:func:`speclab.predict.modecost.instance_spread`)."""
    if params.instance_sd is not None:
        return {"instance_sd": params.instance_sd, "instance_sd_source": "given (instance_sd)"}
    from speclab.predict.modecost import instance_spread

    data = load_run(run.path)
    sd, source = instance_spread(data.manifest.get("host"), data.server.get("dtype") or params.dtype,
                                 embedded=params.mode == "embedded")
    return {"instance_sd": sd, "instance_sd_source": source}


def measure_calibration(params: BaselineParams, run: Run, *, progress: bool = False) -> dict[str, Any]:
    """``verify_cost: calibrate``: a baseline and an n-gram arm of one per-category plan on
    prompts the baseline did not use (:func:`speclab.measure.calibration.measure_verify_cost`);
    the baseline arm :func:`run_baseline` already swept on its own server is reused. Returns
    the cost-model record's fields naming the two runs."""
    from speclab.measure.calibration import finished_calibration_baseline, measure_verify_cost
    from speclab.serve.embedded import embedded_option

    used = set(Plan.load(run.path).prompts)  # calibrate on prompts the baseline did not use
    config, chosen = _calibration_inputs(params, used)
    baseline_arm = finished_calibration_baseline(run.path / CALIBRATION_DIR)
    if baseline_arm is None:
        print(f"speclab: {chosen.said}")
    # one category per level at the lowest concurrency (a spread of draft tokens per step),
    # mixed levels above it (full batches at the sizes predicted): the plan make
    # bench-predictor validates (docs/predictor.md)
    runs = measure_verify_cost(params.target(embedded_option("ngram")), config, prompts=chosen.prompts,
                               baseline_run=baseline_arm, split_concurrency=[min(config.concurrency)],
                               progress=progress, outputs_root=run.path / CALIBRATION_DIR)
    return {"calibration_prompts": chosen.said, "calibration_prompts_builtin": chosen.builtin,
            "calibration_baseline_run": str(runs.baseline_run), "calibration_spec_run": str(runs.spec_run)}


def prediction_options(methods: Sequence[str], ngram_k: int, suffix_k: int) -> list[SpecOption]:
    """The options 01-baseline predicts (the embedded defaults' lookup bounds for n-gram)."""
    options = []
    for method in methods:
        if method in NGRAM_METHODS:
            options.append(default_option(method, ngram_k))
        else:
            options.append(default_option(method, suffix_k))
    return options


def predictions_for_baseline(data: RunData, params: BaselineParams, model: CalibratedStepTime) -> pd.DataFrame:
    """Predicted acceptance, tok/s and speedup per option x category x concurrency; saved."""
    from speclab.options import INSTANCE_SD
    from speclab.predict.predictions import predict_from_baseline

    instance_sd = params.instance_sd if params.instance_sd is not None else model.instance_sd
    frames = [predict_from_baseline(data.path, option, model, instance_sd=INSTANCE_SD if instance_sd is None else instance_sd)
              for option in prediction_options(params.predict_methods, params.predict_k,
                                               params.predict_suffix_k)]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not table.empty:
        table.to_parquet(data.path / PREDICTIONS_PARQUET, index=False)
    return table


def prediction_parts(params: BaselineParams, predicted: pd.DataFrame, model: CalibratedStepTime) -> pd.DataFrame:
    """Where 01 was given a 00-profile run of this server: each option's predicted speedup per
    concurrency as parts (tokens per step from acceptance, then each bucket's extra time, then
    speculative mode's own cost, the sum of its labelled parts), every part labelled measured,
    fitted, borrowed or assumed (:func:`speclab.predict.stepparts.decompose_speedup`). Empty
    without a profile run."""
    if not params.profile_run or predicted.empty:
        return pd.DataFrame()
    from dataclasses import replace

    from speclab.predict import stepparts
    from speclab.predict.modecost import combined_label

    summary, scaling = stepparts.profile_tables(params.profile_run)
    profiled = Run.open(Path(params.profile_run)).manifest.get("params") or {}
    moe = "moe" in set(summary.get("bucket", pd.Series(dtype=str)).astype(str))
    forms = stepparts.fit_part_forms(stepparts.load_gpu_step(), "moe-30b-a3b" if moe else "dense-8b")
    base = stepparts.profile_parts_model(
        summary, scaling, speculative_profile=profiled.get("option", "baseline") != "baseline",
        attention_draft_factor=stepparts.attention_draft_factor(forms))
    frames = []
    methods = {o.label: o.method for o in prediction_options(params.predict_methods, params.predict_k,
                                                              params.predict_suffix_k)}
    for row in predicted[predicted["category"] == "all"].to_dict("records"):
        method = methods.get(row["option"])
        overhead, source = model.spec_mode_overhead_for(int(row["concurrency"]), method)
        parts = model.mode_cost_parts(method, int(row["concurrency"])) if source == "parts" else []
        low, high = (0.0, 0.0) if overhead is None else (overhead[0] * 1e3, overhead[1] * 1e3)
        priced = replace(base, spec_overhead_ms=(low, high),
                         spec_overhead_label=combined_label([p["label"] for p in parts]) if parts else "assumed",
                         spec_overhead_source=row.get("mode_cost_parts") or source)
        frames.append(stepparts.decompose_speedup(
            priced, [row["concurrency"]], tokens_per_step=max(float(row["tokens_per_step"]), 1.0),
            verified_tokens_per_seq=max(float(row["verified_tokens_per_seq"]), 1.0), acceptance_label="measured",
            acceptance_source="replayed over this baseline's greedy outputs").assign(option=row["option"]))
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


def search_methods(params: BaselineParams, engine: str | None) -> list[str]:
    """The methods the configuration search prices: 01's ``predict_methods``, plus vLLM's GPU
    n-gram (``ngram_gpu``, which keeps async scheduling) beside its CPU one where the server is
    an external vLLM (the embedded CPU engine cannot run it)."""
    methods: list[str] = [str(m) for m in dict.fromkeys(params.predict_methods)]
    if params.mode == "external" and (engine or "vllm") == "vllm" and "ngram" in methods and "ngram_gpu" not in methods:
        methods.insert(methods.index("ngram") + 1, "ngram_gpu")
    return methods


def configuration_search(params: BaselineParams, data: RunData, model: CalibratedStepTime, *,
                         ks: Sequence[int] | None = None, out_dir: Path | None = None) -> Any:
    """From verdict to configuration (:func:`speclab.predict.configsearch.search`): every option
    at k = 1 ... 8, and on vLLM per-batch-size schedules, predicted from this baseline with 01's
    step model, weighted by ``params.traffic``; the recommendation with its exact restart line is
    written to recommended-config.json (in ``out_dir``, default the baseline's run folder)."""
    from speclab.options import INSTANCE_SD
    from speclab.predict import configsearch
    from speclab.predict.payback import restart_cost_s
    from speclab.predict.predictions import predict_from_baseline

    engine = str(data.server.get("engine") or ("vllm" if params.mode == "embedded" else "unknown"))
    cpu_engine = params.mode == "embedded" or "cpu" in str(data.server.get("version") or "").lower()
    instance_sd = params.instance_sd if params.instance_sd is not None else model.instance_sd
    sd = INSTANCE_SD if instance_sd is None else instance_sd
    predictions: dict[tuple[str, int], pd.DataFrame] = {}
    for method in search_methods(params, engine):
        for k in ks or configsearch.KS:
            table = predict_from_baseline(data.path, default_option(method, k), model, instance_sd=sd, resamples=200)
            predictions[(method, k)] = table[table["category"] == "all"].reset_index(drop=True)

    def off_cost_ms(method: str, c: float) -> tuple[float, float]:
        rng, _ = model.spec_mode_overhead_for(int(c), method)
        return (0.0, 0.0) if rng is None else (rng[0] * 1e3, rng[1] * 1e3)

    def schedule_cost_ms(method: str, c: float) -> tuple[float, float, str]:
        base = predictions[next(key for key in predictions if key[0] == method)]
        step = float(base.loc[(base["concurrency"] - c).abs().idxmin(), "baseline_step_ms"])
        return configsearch.dynamic_cost_ms(engine, data.server.get("version"), method, c, step, cpu_engine=cpu_engine)

    found = configsearch.search(predictions, params.traffic, engine=engine, option_for=default_option,
                                off_cost_ms=off_cost_ms,
                                schedule_cost_ms=schedule_cost_ms if engine == "vllm" else None)
    restart_s, restart_from = restart_cost_s(params.restart_minutes, data.server.get("load_time_s"))
    write_json((out_dir or data.path) / RECOMMENDED_CONFIG_JSON,
               recommended_record(found, engine=engine, restart_s=restart_s, restart_from=restart_from))
    return found


def recommended_record(found: Any, *, engine: str, restart_s: float | None, restart_from: str) -> dict[str, Any]:
    """recommended-config.json: the configuration to restart into (``option``: None to keep the
    baseline), its exact restart line, its predicted speedup with interval per concurrency, the
    expected daily gain and payback, what was not judged, the runners-up and the restart plan."""
    from speclab.predict.configsearch import restart_args

    def cells(cand: Any) -> dict[str, Any]:
        return {f"{r.concurrency:g}": ({"k": int(r.k), "speedup": round(r.speedup, 4), "low": round(r.low, 4),
                                         "high": round(r.high, 4)} if r.judged else {"judged": False})
                for r in cand.cells.itertuples()}

    def payback_h(cand: Any) -> float | None:
        if restart_s is None or cand.daily_gain_h <= 0:
            return None
        return round(restart_s / 3600.0 / (cand.daily_gain_h / 24.0), 3)

    best = found.recommended
    runners = [c for c in found.candidates if c is not best][:5]
    return {
        "option": None if best is None else {**best.option.model_dump(mode="json", exclude_defaults=True),
                                             "label": best.label},
        "engine": engine,
        "restart_args": [] if best is None else restart_args(engine, best.option, best.schedule),
        "schedule": None if best is None or not best.schedule else [list(r) for r in best.schedule],
        "predicted_speedup_by_concurrency": {} if best is None else cells(best),
        "expected_daily_gain_server_h": None if best is None else round(best.daily_gain_h, 3),
        "expected_daily_gain_interval_h": None if best is None else [round(best.daily_gain_low_h, 3),
                                                                     round(best.daily_gain_high_h, 3)],
        "restart_minutes": None if restart_s is None else round(restart_s / 60.0, 2),
        "restart_from": restart_from,
        "payback_hours": None if best is None else payback_h(best),
        "tolerance": found.tolerance,
        "beyond_sweep": [{"concurrency": c, "hours_per_day": h} for c, h in found.unjudged],
        "swept_concurrency": found.swept,
        "runners_up": [{"label": c.label, "daily_gain_server_h": round(c.daily_gain_h, 3),
                        "eligible": c.eligible, "why_not": c.why_not or "saves less server time a day",
                        "restart_args": restart_args(engine, c.option, c.schedule)} for c in runners],
        "plan": found.plan,
        "plan_restarts": found.plan_restarts,
        "candidates": len(found.candidates),
    }


class ConfigurationCheck(NamedTuple):
    """What 02 says about the configuration it ran: sentences and tables (none without one)."""

    sentences: list[str]
    tables: list[pd.DataFrame]


def check_configuration(params: SpecParams, base: RunData, spec: RunData) -> ConfigurationCheck:
    """02's check of a recommended configuration or schedule: whether the server ran the schedule
    (:func:`speclab.predict.accuracy.schedule_check`, with the counters' draft deltas per level
    beside it) and the recommendation's predicted speedup against the measured decode speedup
    per concurrency."""
    from speclab.params import read_recommended_config
    from speclab.predict.accuracy import measured_decode_interval, schedule_check
    from speclab.report import tables

    sentences: list[str] = []
    frames: list[pd.DataFrame] = []
    if not params.schedule and not params.recommended_config:
        return ConfigurationCheck(["No recommended configuration or schedule was given: nothing to check here."], [])
    if params.schedule:
        check = schedule_check(spec.path, params.schedule)
        sentences.append(check.attrs["verdict"])
        frames.append(check)
        counters = spec.levels[[c for c in ("concurrency", "repeat", "requests") if c in spec.levels]].copy()
        counters["drafted_tokens"] = [(lv.get("server_counters") or {}).get("d_draft_tokens")
                                      for lv in spec.levels.to_dict("records")]
        frames.append(counters)
    if params.recommended_config:
        record = read_recommended_config(params.recommended_config)
        predicted = tables.recommended_speedups(record)
        measured = measured_decode_interval(base.path, spec.path)
        measured = measured[measured["category"] == "all"].drop(columns=["category"])
        both = predicted.merge(measured, on="concurrency", how="left")
        both["within_interval"] = ((both["measured_decode_speedup"] >= both["predicted_speedup_low"])
                                   & (both["measured_decode_speedup"] <= both["predicted_speedup_high"]))
        frames.append(both)
        judged = both.dropna(subset=["measured_decode_speedup", "predicted_speedup"])
        sentences.append(f"The recommendation ({record['option']['label']}) predicted "
                         + ", ".join(f"{r.predicted_speedup:.2f}x at c={r.concurrency:g}" for r in judged.itertuples())
                         + "; measured " + ", ".join(f"{r.measured_decode_speedup:.2f}x" for r in judged.itertuples())
                         + f" ({int(judged['within_interval'].sum())} of {len(judged)} inside the predicted interval).")
        sentences += repredict_after_restart(base, spec)
    return ConfigurationCheck(sentences, frames)


def repredict_after_restart(base: RunData, spec: RunData) -> list[str]:
    """The restart plan's second step: every configuration predicted again from the baseline, with
    speculative mode's own cost as this restart measured it (02's own steps, ``learn_overhead``),
    into this run's recommended-config.json; sentences saying what it now recommends."""
    from speclab.predict.stepmodel import learn_overhead, load_cost_model

    model = load_cost_model(base.path)
    if model is None:
        return ["The baseline saved no cost model: nothing to predict again."]
    try:
        note = learn_overhead(model, spec.path, base)
    except SpeclabError as exc:
        return [f"The other configurations were not predicted again: {exc.message}"]
    params = BaselineParams.validate_values({k: v for k, v in (base.manifest.get("params") or {}).items()
                                             if k in BaselineParams.model_fields})
    found = configuration_search(params, base, model, out_dir=spec.path)
    best = found.recommended
    verdict = (f"now recommends {best.label} ({best.daily_gain_h:.2f} server-hours a day)" if best is not None
               else "now recommends keeping the baseline")
    return [f"Predicted again with this restart's measurement ({note}): the search {verdict}; the ranking is in this "
            "run's recommended-config.json."]
