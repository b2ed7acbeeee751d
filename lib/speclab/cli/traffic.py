"""``speclab replay-logs`` (predict from production logs) and ``speclab gen-traffic-log``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from speclab.errors import SpeclabError


def _ints(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def _cost_model(args: argparse.Namespace) -> tuple[Any, float, Any]:
    """(step-time model or None, restart seconds, the baseline's benchmark predictions or None)."""
    import pandas as pd

    if args.baseline_run and args.cost_model:
        raise SpeclabError("Give --baseline-run or --cost-model, not both.")
    if args.baseline_run:
        from speclab.predict.stepmodel import load_cost_model
        from speclab.runfolder import MANIFEST, PREDICTIONS_PARQUET
        from speclab.runs import read_json

        model = load_cost_model(args.baseline_run)
        if model is None:
            raise SpeclabError(f"{args.baseline_run} has no cost_model.json; run 01-baseline there first.")
        server = read_json(Path(args.baseline_run) / MANIFEST).get("server") or {}
        load = args.load_time_s or float(server.get("load_time_s") or 1800.0)
        predictions = Path(args.baseline_run) / PREDICTIONS_PARQUET
        return model, load, pd.read_parquet(predictions) if predictions.exists() else None
    if args.cost_model:
        from speclab.params import load_params_file
        from speclab.traffic.day import given_cost_model

        return given_cost_model(load_params_file(args.cost_model)), args.load_time_s or 1800.0, None
    return None, args.load_time_s or 1800.0, None


def cmd_replay_logs(args: argparse.Namespace) -> int:
    from speclab.runs import Run
    from speclab.traffic.replay import iter_options
    from speclab.traffic.workbook import replay_traffic

    options = iter_options(args.ngram_k, args.suffix_k, args.lookup_min, args.lookup_max)
    model, load_time_s, predictions = _cost_model(args)
    workers = None if args.single_process or args.ray_address else (args.workers or os.cpu_count() or 1)
    params = {k: v for k, v in vars(args).items() if k != "func"}
    run = Run.create("replay-logs", params, kind="replay-logs", run_dir=args.resume)
    with run.recording():
        report = replay_traffic(
            args.log, run.path, options, model_dir=args.model, cost_model=model, load_time_s=load_time_s,
            workers=workers, ray_address=args.ray_address, batch_size=args.batch_size, fmt=args.format,
            max_rows=args.max_rows, bin_minutes=args.bin_minutes, max_model_len=args.max_model_len,
            benchmark_predictions=predictions, server_url=args.server, api_key_env=args.api_key_env,
            suffix_python=args.suffix_python,
            progress=not args.quiet)
        run.update(traffic={"throughput": report.throughput(), "bad_rows": report.replay.bad_rows,
                            "rows": report.replay.rows, "notes": report.notes})
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(report.acceptance["overall"][["option", "requests", "acceptance_rate", "mean_acceptance_length",
                                            "tokens_per_step"]].round(3).to_string(index=False))
        if report.day is not None:
            cols = ["option", "predicted_speedup", "min_bin_speedup", "baseline_tok_s", "predicted_tok_s",
                    "server_hours_saved_per_day", "payback_hours"]
            print()
            print(report.day.per_option[cols].round(3).to_string(index=False))
    for example in report.replay.bad_examples:
        print(f"bad row {example['row']}: {example['reason']}: {example['excerpt'][:80]}")
    for note in report.notes:
        print(f"note: {note}")
    speed = report.throughput()
    print(f"{speed['output_positions']:,} output positions x {len(options)} options; wall {speed['wall_s']:.1f} s; "
          f"run folder {run.path}")
    return 0


def cmd_gen_traffic_log(args: argparse.Namespace) -> int:
    from speclab.traffic.gen import write_log

    path = write_log(args.out, args.requests, seed=args.seed, days=args.days, ids=args.ids, shape=args.shape)
    print(f"wrote {args.requests:,} synthetic requests to {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay-logs", help="predict n-gram/suffix from production request logs (Ray, resumable)")
    p.add_argument("--log", required=True, help="JSONL (.jsonl, .jsonl.gz) or Parquet log of served requests")
    p.add_argument("--model", help="the served model's local folder (tokenizer); default: the embedded model")
    p.add_argument("--format", default="auto", choices=["auto", "chat", "openai", "sharegpt"])
    p.add_argument("--ngram-k", type=_ints, default=[2, 4, 6], help="n-gram k values to replay (default 2,4,6)")
    p.add_argument("--lookup-min", type=int, default=2, help="n-gram prompt_lookup_min")
    p.add_argument("--lookup-max", type=int, default=4, help="n-gram prompt_lookup_max")
    p.add_argument("--suffix-k", type=_ints, default=[], help="suffix k values (needs the server venv), e.g. 8")
    p.add_argument("--baseline-run", help="01-baseline run folder: its calibrated cost model, load time, predictions")
    p.add_argument("--cost-model", help="YAML: baseline [{batch, step_ms}] and verify {per_token_s, ...}")
    p.add_argument("--load-time-s", type=float, default=None, help="restart downtime (default: baseline's, or 1800)")
    p.add_argument("--workers", type=int, default=None, help="local Ray CPUs (default: all cores)")
    p.add_argument("--ray-address", help="a running Ray cluster (ray://head:10001) instead of a local Ray")
    p.add_argument("--single-process", action="store_true", help="no Ray: replay in this process")
    p.add_argument("--batch-size", type=int, default=2000, help="log rows per batch (the unit of work and resume)")
    p.add_argument("--max-rows", type=int, default=None, help="replay only the first N rows")
    p.add_argument("--bin-minutes", type=float, default=15.0, help="time bin of the concurrency profile")
    p.add_argument("--max-model-len", type=int, default=None, help="default: the model's max_position_embeddings")
    p.add_argument("--server", help="check tokenisation against this server's /tokenize first")
    p.add_argument("--api-key-env", help="environment variable holding the --server's API key (never stored)")
    p.add_argument("--suffix-python", help="python with arctic-inference (default: the embedded server venv)")
    p.add_argument("--resume", help="an earlier replay-logs run folder: finished batches are kept")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_replay_logs)

    p = sub.add_parser("gen-traffic-log", help="write a seeded synthetic production log (no real user data)")
    p.add_argument("--out", required=True, help=".jsonl, .jsonl.gz or .parquet")
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--days", type=float, default=1.0)
    p.add_argument("--ids", action="store_true", help="token ids instead of text (replay-only benchmarks)")
    p.add_argument("--shape", default="chat", choices=["chat", "openai"])
    p.set_defaults(func=cmd_gen_traffic_log)
