"""Make the recorded-stream fixture: a baseline and an n-gram run of the embedded vLLM on one
small plan, with every request's chunk timing kept (what the step-level model is fitted on).

The plan is the one of tests/data/predict/f32-baseline (4 categories x 2 prompts, concurrency
1 and 4, 128 tokens); float32, so the n-gram run writes the baseline's texts exactly. Text
fields are dropped and times rounded to microseconds to keep the fixture small.

Usage (one vLLM at a time on this machine, hence the lock):
    flock /tmp/speclab-vllm.lock .venv/bin/python scripts/stream_fixture.py --out tests/data/predict
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from speclab.measure.loadgen import SweepConfig, bench
from speclab.options import SpecOption
from speclab.runfolder import Plan
from speclab.serve.embedded import embedded_option
from speclab.serve.target import ServerTarget

PLAN_FROM = Path(__file__).resolve().parents[1] / "tests" / "data" / "predict" / "f32-baseline"
KEEP = ("manifest.json", "plan.json", "prompts.jsonl", "summary.json")
DROP = ("text", "reasoning_text")


def compact(run_dir: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in KEEP:
        shutil.copy(run_dir / name, out / name)
    with open(run_dir / "requests.jsonl") as src, open(out / "requests.jsonl", "w") as dst:
        for line in src:
            row = {k: v for k, v in json.loads(line).items() if k not in DROP}
            row["chunk_offsets_s"] = [round(t, 6) for t in row.get("chunk_offsets_s") or []]
            dst.write(json.dumps(row, separators=(",", ":")) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for stream-f32-baseline/ and stream-f32-ngram/")
    args = parser.parse_args()
    plan = Plan.load(PLAN_FROM)
    config = SweepConfig(concurrency=[1, 4], categories=sorted({p.category for p in plan.requests}), per_category=2,
                         max_tokens=128, warmup_requests=1)
    with tempfile.TemporaryDirectory(prefix="speclab-stream-fixture-") as tmp:
        for name, option in (("stream-f32-baseline", SpecOption()), ("stream-f32-ngram", embedded_option("ngram"))):
            result = bench(ServerTarget(dtype="float32", option=option), config, name=name, run_dir=Path(tmp) / name,
                           plan=plan, progress=False)
            compact(result.run_dir, args.out / name)
            print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
