"""``speclab setup | serve | probe | explain-seeds``: the embedded server and external probing."""

from __future__ import annotations

import argparse
import signal
import time


def cmd_setup(args: argparse.Namespace) -> int:
    from speclab.serve.embedded import setup_embedded

    for key, value in setup_embedded(with_eagle3=args.eagle3).items():
        print(f"{key}: {value}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from speclab.runs import Run
    from speclab.serve.embedded import embedded_option
    from speclab.serve.target import ServerTarget, serve_target

    option = embedded_option(args.option, args.k)
    target = ServerTarget(mode="embedded", option=option, port=args.port, dtype=args.dtype)
    run = Run.create(f"serve-{args.option}", target.model_dump(mode="json"), kind="serve")
    with run.recording(), serve_target(target, run) as live:
        ident = live.identity
        print(f"speclab: {ident.engine} {ident.version} serving {live.model!r} at {live.endpoint.v1}")
        print(f"  option: {option.label}; load time {ident.load_time_s:.1f} s; log in {run.path}")
        if option.method == "eagle3":
            print("  note: the EAGLE-3 head is RANDOMLY initialised: expect ~0 % acceptance.")
        print(f"  metrics: {live.endpoint.at_root('metrics')}   (Ctrl-C stops the server)")
        if args.for_seconds:
            time.sleep(args.for_seconds)
        else:
            signal.pause()
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from speclab.measure.identity import contradictions, probe_server
    from speclab.options import SpecOption

    identity = probe_server(args.endpoint, api_key_env=args.api_key_env)
    width = max(len(k) for k, _ in identity.summary_rows())
    for key, value in identity.summary_rows():
        print(f"{key:<{width}}  {value}")
    if identity.cmdline:
        print(f"{'cmdline':<{width}}  {' '.join(identity.cmdline)}")
    for note in identity.notes:
        print(f"note: {note}")
    if args.expect:
        problems = contradictions(identity, SpecOption(method=args.expect, num_speculative_tokens=args.k))
        for problem in problems:
            print(f"CONTRADICTION: {problem}")
        return 2 if problems else 0
    return 0


def cmd_explain_seeds(args: argparse.Namespace) -> int:
    """The seeds' case through the what-if (verdict and the input that flips it, per concurrency),
    then, unless ``--whatif-only``, the profile-share decomposition of docs/moe.md section 5."""
    from speclab.cli.whatif import print_whatif
    from speclab.whatif import seeds as ws

    result = ws.explain_seeds(args.whatif_scenario)
    print_whatif(result, as_json=args.json, long=args.long)
    if args.whatif_only or args.json:
        return 0
    print("\n" + "-" * 100 + "\nThe seeds' profile shares in parts (docs/moe.md section 5):\n")
    return _explain_seeds_profile(args)


def _explain_seeds_profile(args: argparse.Namespace) -> int:
    import pandas as pd

    from speclab.moe import seeds as ms
    from speclab.moe import workbook as mw
    from speclab.params import MoESpecParams, load_params_file
    from speclab.predict.stepparts import fit_part_forms

    scenario = ms.SeedScenario.model_validate(load_params_file(args.scenario)) if args.scenario else ms.SeedScenario()
    if args.scaling:
        scenario = scenario.model_copy(update={"scaling": args.scaling})
    params = MoESpecParams(cpu_bench=False, acceptance_baseline_run=args.baseline,
                           acceptance_category=args.category or None, gpu_step=args.gpu_step)
    forms = fit_part_forms(mw.gpu_step_frame(params), ms.RANK_SHAPE) if args.gpu_step else ms.rank_forms()
    costs = mw.seeds_moe_costs(mw.gpu_bench_frame(params), forms)
    if args.moe_curve != "both":
        keep = {"tp8-rank": "TP-8 rank", "full-expert": "full-expert layer"}[args.moe_curve]
        costs = {k: v for k, v in costs.items() if k == keep}
    alphas = [float(a) for a in args.alpha.split(",")] if args.alpha else [scenario.alpha]
    routings = [r.strip() for r in args.routing.split(",") if r.strip()]
    with pd.option_context("display.width", 220, "display.max_columns", 30, "display.max_rows", 400,
                           "display.max_colwidth", 120):
        for alpha in alphas:
            scen = scenario.model_copy(update={"alpha": alpha})
            acceptance = mw.ngram_acceptance(params, scen) if args.baseline else None
            result = ms.explain_seeds(scen, acceptance, moe_curves=costs, routings=routings, forms=forms)
            acc = result.acceptance
            print(f"{scen.name}: n-gram k={scen.num_speculative_tokens}, {scen.scaling} scaling, "
                  f"{acc['tokens_per_step']:.2f} tokens per step ({acc['label']})\n")
            print(result.summary.round(3).to_string(index=False))
            for (routing, curve), part in result.parts.groupby(["routing", "moe_curve"], sort=False):
                print(f"\nSpeedup in parts, {routing} routing, {curve} MoE line (tokens per step each part "
                      "costs; acceptance adds, the rest subtract):")
                print(ms.parts_pivot(part).round(3).to_string(index=False))
                if args.long:
                    cols = ["concurrency", "part", "label", "decode_ms", "verify_ms", "extra_ms", "speedup_change",
                            "speedup_after"]
                    print(part[cols].round(3).to_string(index=False))
            print("\nWhere each part's scaling comes from:")
            for row in result.parts.drop_duplicates(["moe_curve", "part"]).itertuples():
                if row.part in {"moe", "unexplained"} or row.moe_curve == result.parts["moe_curve"].iloc[0]:
                    part = f"{row.part} ({row.moe_curve})" if row.part in {"moe", "unexplained"} else row.part
                    print(f"  {part:<30} {row.label:<9} {row.source}")
            print("\nBaseline from the parts:")
            print(result.baseline_check.round(2).to_string(index=False))
            if not result.overhead_needed.empty:
                print("\nSpeculative-mode overhead that would explain the measured loss where the model predicts a win:")
                print(result.overhead_needed.round(2).to_string(index=False))
            print()
            for line in result.statements:
                print(f"- {line}")
            print()
        if args.moe:
            print("\nWith expert budgets (docs/moe.md):\n")
            print(mw.explain_seeds_moe(scenario, args.baseline).round(3).to_string(index=False))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("setup", help="create the embedded server venv and convert the model (once)")
    p.add_argument("--eagle3", action="store_true", help="also write the random EAGLE-3 drafter head")
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("serve", help="serve SmolLM2-135M on the embedded vLLM (CPU), 127.0.0.1 only")
    p.add_argument("--option", default="baseline", choices=["baseline", "ngram", "suffix", "eagle3"])
    p.add_argument("--k", type=int, default=None, help="tokens drafted per step (option default)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"],
                   help="auto: bf16 where the CPU has it natively (AVX-512), else float32")
    p.add_argument("--for-seconds", type=float, default=None, help="stop after this long")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("probe", help="say what a running server really is (external mode)")
    p.add_argument("--endpoint", required=True, help="e.g. http://host:8000 or http://host:8000/v1")
    p.add_argument("--expect", choices=["baseline", "ngram", "suffix", "eagle3", "draft_model"],
                   help="the option you believe is running; exit 2 if the server contradicts it")
    p.add_argument("--k", type=int, default=None)
    p.add_argument("--api-key-env", default=None, help="env var holding the API key (servers run with --api-key)")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("explain-seeds",
                       help="the seeds' Kimi-K2.5 8xPCIe n-gram case: the what-if's verdict and what flips it per "
                            "concurrency (docs/whatif.md), then the profile shares in parts (docs/moe.md)")
    p.add_argument("--scenario", help="a SeedScenario YAML (default: the seeds' own figures)")
    p.add_argument("--alpha", help="assumed per-token acceptance values to tabulate, e.g. 0.3,0.5")
    p.add_argument("--baseline", help="01-baseline run whose answers n-gram is replayed over (your own "
                   "thinking-on baseline; the embedded SmolLM2 run is only a stand-in)")
    p.add_argument("--category", default=None, help="--baseline: the category to replay (default: all)")
    p.add_argument("--routing", default="uniform,zipf1.0", help="routing models of the MoE part, comma-separated")
    p.add_argument("--moe-curve", default="both", choices=["tp8-rank", "full-expert", "both"],
                   help="MoE cost line: one TP-8 rank (1/8 expert slices) or the full-expert layer")
    p.add_argument("--scaling", choices=["parts", "linear_in_tokens"], default=None,
                   help="override the scenario's scaling (linear_in_tokens: the old assumption)")
    p.add_argument("--gpu-step", default=None, help="GPU step curves JSON (default: the shipped H200 ones)")
    p.add_argument("--long", action="store_true", help="also print every part's decode/verify ms")
    p.add_argument("--moe", action="store_true", help="also: expert budgets per concurrency")
    p.add_argument("--whatif-scenario", default=None,
                   help="the what-if scenario (default: lib/speclab/data/whatif/seeds-kimi-k25-8xpcie.yaml)")
    p.add_argument("--whatif-only", action="store_true", help="print only the what-if (verdicts, flips, parts)")
    p.add_argument("--json", action="store_true", help="the what-if as one JSON object (implies --whatif-only)")
    p.set_defaults(func=cmd_explain_seeds)
