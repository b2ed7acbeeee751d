"""What does speculative mode's switch of async scheduling cost a decode step on this host?

vLLM turns async scheduling off for its CPU-side proposers (n-gram, suffix: vllm/config/vllm.py,
"Async scheduling not supported with ngram-based speculative decoding and will be disabled",
which our n-gram server logs say). That is part of speculative mode's own cost, which no probe of
the baseline server can see (docs/predictor.md, "Without a restart"). On a GPU, async
scheduling hides the CPU's scheduling work behind the GPU's, so losing it costs time; on a
2-core CPU the scheduler competes with the compute threads, so losing it may *save* time.

This benchmark measures that part directly: the embedded baseline (no speculation) served with
async scheduling as vLLM chooses it (on) and with ``--no-async-scheduling``, the same plan in
both (one prompt a category per level, 64-token answers), arms alternating A B A B so a
drifting host cancels out. It prints, per concurrency, the mean time per output token of each
arm, their ratio and the difference per decode step, with the host's speed probe per arm.

    flock /tmp/speclab-vllm.lock .venv/bin/python -u benchmarks/spec_mode_cost.py [--dtype float32] [--rounds 2]

About 8 minutes on a 2-core host (four server starts). Every figure is of this host and dtype.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from speclab.measure.loadgen import SweepConfig, measure_sweep, plan_sweep
from speclab.runfolder import load_run
from speclab.runs import Run
from speclab.serve.embedded import embedded_launch
from speclab.serve.launch import free_port
from speclab.serve.target import ServerTarget, serve_target

ARMS = {"async on (vLLM's choice)": [], "async off (--no-async-scheduling)": ["--no-async-scheduling"]}


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
            for label, extra in ARMS.items():
                launch = embedded_launch(port=free_port(), dtype=args.dtype)
                launch = launch.model_copy(update={"extra_args": [*launch.extra_args, *extra]})
                name = f"r{round_ + 1}-{'off' if extra else 'on'}"
                run = Run.create(name, {"arm": label}, kind="spec-mode-cost", run_dir=parent.path / name)
                with serve_target(ServerTarget(mode="launch", launch=launch), run) as live, run.recording():
                    measure_sweep(live.endpoint, live.model, config, run, plan=plan, arm=name, progress=False)
                for level in load_run(run.path).levels.to_dict("records"):
                    load = level.get("host_load") or {}
                    rows.append({"round": round_ + 1, "arm": label, "concurrency": int(level["concurrency"]),
                                 "requests": level["requests"], "tpot_ms": level["tpot_s_mean"] * 1e3,
                                 "server_tpot_ms": (level.get("server_tpot_s_mean") or float("nan")) * 1e3,
                                 "host_probe_ms": load.get("host_probe_ms")})
                print(f"[{time.perf_counter() - started:.0f} s] {name} ({label}) done")
    frame = pd.DataFrame(rows)
    frame.to_csv(Path(parent.path) / "spec-mode-cost.csv", index=False)
    print(f"\n== per arm and round ({args.dtype}; mean time per output token, ms)")
    print(frame.round(2).to_string(index=False))
    means = frame.groupby(["concurrency", "arm"])["server_tpot_ms"].mean().unstack("arm")
    on, off = list(ARMS)
    print(f"\n== async scheduling off against on ({args.dtype}; the server's time per output token, mean of "
          f"{args.rounds} rounds; a decode step emits one token a sequence, so this is the step)")
    for c, row in means.iterrows():
        print(f"c={c}: on {row[on]:.2f} ms, off {row[off]:.2f} ms, off/on {row[off] / row[on]:.3f}x, "
              f"{row[off] - row[on]:+.1f} ms a decode step with async scheduling off")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
