"""The baseline's self-check rerun: part of its top level swept again on the same server.

In bf16 a baseline's greedy outputs may differ from themselves when the batch changes shape;
a speculative arm's divergence is judged against that noise. This module measures the rerun
(the first ``requests`` of the top level, at half its concurrency: another batch shape, as
speculation makes) into ``<run>/self-check``; :func:`speclab.predict.compare.rerun_divergence`
compares it with the baseline and :data:`speclab.runfolder.SELF_DIVERGENCE_JSON` records it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from speclab.measure.loadgen import measure_sweep
from speclab.runfolder import SELF_CHECK_DIR, Plan, PlannedRequest
from speclab.runs import Run, run_id
from speclab.sweep import SweepConfig

if TYPE_CHECKING:  # the server layer's type, named for typing only
    from speclab.serve.target import LiveServer


@dataclass(frozen=True)
class SelfCheckRerun:
    """Where the rerun was recorded and what it repeated."""

    path: Path
    top_level: int
    from_concurrency: int
    rerun_concurrency: int
    requests: int


def rerun_top_level(live: LiveServer, run_dir: Path, plan: Plan, config: SweepConfig, requests: int, *,
                    progress: bool = False) -> SelfCheckRerun:
    """Sweep the first ``requests`` of the baseline's top level again on ``live`` at half its
    concurrency, into ``run_dir/self-check`` (a run folder of its own)."""
    top = max(plan.levels(), key=lambda level: (level[1], level[0]))
    chosen = plan.for_level(top[0])[:requests]
    rerun_c = max(1, top[1] // 2)
    subplan = Plan([PlannedRequest(**{**r.__dict__, "level": 0, "concurrency": rerun_c}) for r in chosen],
                   {r.prompt_id: plan.prompts[r.prompt_id] for r in chosen})
    config = config.sweep_only().model_copy(update={"concurrency": [rerun_c], "warmup_requests": 0})
    sub = Run.create("self-check", {"of": run_id(run_dir), "concurrency": rerun_c}, kind="self-check",
                     run_dir=run_dir / SELF_CHECK_DIR)
    with sub.recording():
        measure_sweep(live.endpoint, live.model, config, sub, plan=subplan, arm="self-check", progress=progress)
    return SelfCheckRerun(sub.path, top[0], top[1], rerun_c, len(chosen))
