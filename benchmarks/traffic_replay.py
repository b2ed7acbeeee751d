"""Replayed positions per second per core: one process vs Ray with 1 and 2 workers, one run.

A seeded synthetic log with token ids (no tokenisation: this measures the replay) is replayed
with vLLM's n-gram proposer (k=4, lookup 2..4) three ways, side by side:

* single process: :func:`speclab.traffic.replay.replay_log` without Ray;
* Ray, 1 worker and 2 workers: a local Ray (127.0.0.1) started and warmed first (worker
  processes spawned, the compiled kernel loaded), its start-up printed separately.

For each: wall time, output positions per second per core (end to end: reading the JSONL,
replaying, writing the batch files) and, for the compiled kernel alone, positions per second
of replay time. Then the time a 1-billion-token log (prompt + completion tokens, this log's
token mix) would take on N cores. Target: >= 1 M positions/s per core for n-gram.

Run: ``flock /tmp/speclab-vllm.lock python benchmarks/traffic_replay.py [--requests 20000]``
(the lock: it loads every core of a shared machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from speclab.predict.ngram_fast import pack_requests, replay_ngram_batch  # noqa: E402
from speclab.traffic.gen import write_log  # noqa: E402
from speclab.traffic.replay import _start_ray, iter_options, replay_log  # noqa: E402


def _warm(n: int) -> float:
    """Start a local Ray with ``n`` CPUs and run one tiny replay on every worker; seconds."""
    t0 = time.perf_counter()
    ray = _start_ray(n, None)

    def tiny() -> int:
        replay_ngram_batch(*pack_requests([[1, 2, 3, 1, 2]], [[3, 1, 2, 3]]), 2, 4, 4, 64)
        return os.getpid()

    task = ray.remote(num_cpus=1)(tiny)
    ray.get([task.remote() for _ in range(4 * n)])
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--keep", help="keep the log and run folders here")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="speclab-traffic-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    log = root / f"synthetic-{args.requests}-ids.jsonl"
    if not log.exists():
        t0 = time.perf_counter()
        write_log(log, args.requests, seed=0, ids=True)
        print(f"log: {args.requests:,} requests, {log.stat().st_size / 2**20:.0f} MiB, "
              f"written in {time.perf_counter() - t0:.1f} s")
    options = iter_options([4], [])
    # compile (or load the cached) kernel before timing anything
    replay_ngram_batch(*pack_requests([[1, 2, 3, 1, 2]], [[3, 1, 2, 3]]), 2, 4, 4, 64)
    rows = []
    for label, workers in (("single process", None), ("ray, 1 worker", 1), ("ray, 2 workers", 2)):
        out = root / f"run-{workers or 0}"
        shutil.rmtree(out, ignore_errors=True)
        startup = None
        if workers:
            startup = _warm(workers)
        result = replay_log(log, out, options, batch_size=args.batch_size, workers=workers, progress=False,
                            keep_ray=True)
        if workers:
            import ray

            ray.shutdown()
        stats = result.stats
        cores = workers or 1
        kernel_s = sum(stats["replay_s"].values())
        rows.append({"engine": label, "cores": cores, "ray_start_s": startup, "wall_s": stats["wall_s"],
                     "positions": stats["positions"], "tokens": stats["prompt_tokens"] + stats["output_tokens"],
                     "positions_per_s_per_core": stats["positions"] / stats["wall_s"] / cores,
                     "kernel_positions_per_s": stats["positions"] / kernel_s})
    import pandas as pd

    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(f"\nn-gram k=4 (2..4) over {args.requests:,} requests, {rows[0]['positions']:,} output positions, "
              f"{rows[0]['tokens']:,} logged tokens; {os.cpu_count()} cores on this machine (shared: "
              f"load average {os.getloadavg()[0]:.1f})\n")
        print(table.round(2).to_string(index=False))
    base = rows[0]["positions_per_s_per_core"]
    for row in rows[1:]:
        print(f"{row['engine']}: {row['positions_per_s_per_core'] / base:.2f}x the single process per core")
    per_token = rows[0]["positions"] / rows[0]["tokens"]
    best = max(r["positions_per_s_per_core"] for r in rows)
    scale_out = rows[-1]["positions_per_s_per_core"]  # Ray, 2 workers: the path that scales out
    print(f"\n1e9 logged tokens = {1e9 * per_token:.3g} output positions at this log's mix; time on N cores at "
          f"{scale_out / 1e6:.2f} M positions/s/core (Ray, 2 workers here, driver included; assumes the "
          "per-core rate holds, which needs the log read in parallel beyond a few dozen cores):")
    for n in (1, 2, 16, 64, 256):
        print(f"  {n:>4} cores: {1e9 * per_token / (scale_out * n):9.0f} s")
    kernel = rows[0]["kernel_positions_per_s"]
    verdict = "meets" if best >= 1e6 else "misses"
    print(f"\ntarget >= 1 M positions/s per core: end to end {best / 1e6:.2f} M ({verdict}); "
          f"compiled kernel alone {kernel / 1e6:.1f} M")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
