"""What does speculative mode's switch of async scheduling cost a decode step on this host?

vLLM turns async scheduling off for its CPU-side proposers (n-gram, suffix: vllm/config/vllm.py,
"Async scheduling not supported with ngram-based speculative decoding and will be disabled",
which our n-gram server logs say). That is part of speculative mode's own cost, which no probe of
the baseline server can see (docs/predictor.md, "Without a restart"). On a GPU, async
scheduling hides the CPU's scheduling work behind the GPU's, so losing it costs time; on a
2-core CPU the scheduler competes with the compute threads, so losing it may *save* time.

This benchmark measures it directly, in three arms on the same plan (one prompt a category per
level, 64-token answers), alternating A B C A B C so a drifting host cancels out:

- the embedded baseline with async scheduling as vLLM chooses it (on);
- the same with ``--no-async-scheduling`` (the switch alone);
- n-gram k = 4 whose lookup needs a 200-token match, so it (almost) never drafts: speculative
  mode whole, with nothing to verify (the server's draft counter says how many it made).

It prints, per concurrency, each arm's engine time per output token (a decode step emits one
token a sequence, so this is the step), and the difference against the baseline per step.

    flock /tmp/speclab-vllm.lock .venv/bin/python -u benchmarks/spec_mode_cost.py [--dtype float32] [--rounds 2]

About 10 minutes on a 2-core host (six server starts). Every figure is of this host and dtype.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from speclab.measure.loadgen import SweepConfig, measure_sweep, plan_sweep
from speclab.options import SpecOption
from speclab.runfolder import load_run
from speclab.runs import Run
from speclab.serve.embedded import embedded_launch
from speclab.serve.launch import free_port
from speclab.serve.target import ServerTarget, serve_target

NO_DRAFT = SpecOption(method="ngram", num_speculative_tokens=4, prompt_lookup_min=200, prompt_lookup_max=200)
# label -> (extra server flags, option, short name)
ARMS: dict[str, tuple[list[str], SpecOption, str]] = {
    "baseline, async on (vLLM's choice)": ([], SpecOption(), "on"),
    "baseline, async off (--no-async-scheduling)": (["--no-async-scheduling"], SpecOption(), "off"),
    "n-gram that never drafts (spec mode, nothing to verify)": ([], NO_DRAFT, "nodraft"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "auto"])
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--rounds", type=int, default=2, help="A B pairs, run one after another")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    config = SweepConfig(concurrency=levels, per_category=1, max_tokens=args.max_tokens, warmup_requests=1)
    plan = plan_sweep(config)
    parent = Run.create("spec-mode-cost", {"dtype": args.dtype, "concurrency": levels, "rounds": args.rounds,
                                           "max_tokens": args.max_tokens}, kind="benchmark")
    print(f"run folder: {parent.path}")
    rows = []
    started = time.perf_counter()
    with parent.recording():
        for round_ in range(args.rounds):
            for label, (extra, option, short) in ARMS.items():
                launch = embedded_launch(option, port=free_port(), dtype=args.dtype)
                launch = launch.model_copy(update={"extra_args": [*launch.extra_args, *extra]})
                name = f"r{round_ + 1}-{short}"
                run = Run.create(name, {"arm": label}, kind="spec-mode-cost", run_dir=parent.path / name)
                target = ServerTarget(mode="launch", launch=launch, option=option)
                with serve_target(target, run) as live, run.recording():
                    measure_sweep(live.endpoint, live.model, config, run, plan=plan, arm=name, progress=False)
                for level in load_run(run.path).levels.to_dict("records"):
                    load = level.get("host_load") or {}
                    counters = level.get("server_counters") or {}
                    rows.append({"round": round_ + 1, "arm": short, "concurrency": int(level["concurrency"]),
                                 "requests": level["requests"], "tpot_ms": level["tpot_s_mean"] * 1e3,
                                 "server_tpot_ms": (level.get("server_tpot_s_mean") or float("nan")) * 1e3,
                                 "drafts": counters.get("d_drafts"), "host_probe_ms": load.get("host_probe_ms")})
                print(f"[{time.perf_counter() - started:.0f} s] {name} ({label}) done")
    frame = pd.DataFrame(rows)
    frame.to_csv(Path(parent.path) / "spec-mode-cost.csv", index=False)
    print(f"\n== per arm and round ({args.dtype}; mean time per output token, ms)")
    print(frame.round(2).to_string(index=False))
    means = frame.groupby(["concurrency", "arm"])["server_tpot_ms"].mean().unstack("arm")
    print(f"\n== against the baseline with async scheduling on ({args.dtype}; the server's time per output "
          f"token, mean of {args.rounds} rounds; a decode step emits one token a sequence, so this is the step)")
    for label, (_, _, short) in ARMS.items():
        print(f"  {short}: {label}")
    for c, row in means.iterrows():
        print(f"c={c}: on {row['on']:.2f} ms; off {row['off']:.2f} ms ({row['off'] - row['on']:+.1f} ms a step); "
              f"no-draft n-gram {row['nodraft']:.2f} ms ({row['nodraft'] - row['on']:+.1f} ms a step)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
