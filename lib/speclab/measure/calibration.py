"""The verify-cost calibration runs (``verify_cost: calibrate``): a baseline and a speculative run
of one per-category plan on real servers, on prompts the predicted baseline did not use.

Measurement layer: it starts servers and sweeps them; the step model is fitted from the two run
folders by :func:`speclab.predict.stepmodel.calibrate_from_runs`, which only reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from speclab.errors import SpeclabError
from speclab.measure.loadgen import SweepConfig, bench, plan_sweep
from speclab.options import SpecOption
from speclab.prompts import Prompt
from speclab.runfolder import PLAN_JSON, Plan, PlannedRequest
from speclab.runs import MANIFEST, read_json
from speclab.serve.target import LiveServer, ServerTarget


def plan_per_category(
    config: SweepConfig, prompts: Sequence[Prompt] | None = None, split_concurrency: Sequence[int] | None = None
) -> Plan:
    """A sweep plan where every level holds one category (levels: concurrency x repeat x
    category), so a speculative run's counter deltas are per category.

    ``split_concurrency``: only levels at these concurrencies are split (default: all);
    the others keep their mix of categories, and so fill their batch.
    """
    plan = plan_sweep(config, list(prompts) if prompts is not None else None)
    requests: list[PlannedRequest] = []
    level = -1
    for old_level, concurrency, *_ in plan.levels():
        by_cat: dict[str, list[PlannedRequest]] = {}
        for r in plan.for_level(old_level):
            key = r.category if split_concurrency is None or concurrency in split_concurrency else "mix"
            by_cat.setdefault(key, []).append(r)
        for items in by_cat.values():
            level += 1
            requests.extend(PlannedRequest(**{**r.__dict__, "level": level}) for r in items)
    return Plan(requests, plan.prompts, plan.reused_prompts, plan.notes)


@dataclass(frozen=True)
class CalibrationPrompts:
    """The calibration's prompts, the sentence saying which they are, and whether the built-in
    sets stood in for the user's own (the verify cost then comes from other prompts)."""

    prompts: list[Prompt]
    said: str
    builtin: bool


def calibration_prompts(source: str | None, categories: Sequence[str] | None,
                        used: set[str]) -> CalibrationPrompts:
    """Prompts for the verify-cost calibration, none of them in ``used`` (the baseline's
    plan), and one sentence saying which were taken.

    The prompt source's own leftovers come first (same categories as the baseline); when
    the baseline used them all, the built-in sets stand in: the calibration measures the
    server's step cost, which any real prompt exercises. Raises one sentence when even
    those are used up, so that it can be checked before the baseline sweep starts.
    """
    from speclab.prompts import load_builtin, load_prompts

    own = [p for p in load_prompts(source, categories) if p.id not in used]
    if own:
        cats = sorted({p.category for p in own})
        return CalibrationPrompts(own, f"calibration on {len(own)} prompt(s) the baseline did not use, from "
                                       f"{source or 'the built-in sets'} ({', '.join(cats)})", False)
    builtin = [p for p in load_builtin() if p.id not in used]
    if builtin:
        return CalibrationPrompts(builtin, f"calibration on the built-in prompt sets: the baseline used every "
                                           f"prompt of {source or 'its categories'}", True)
    raise SpeclabError("No prompt is left for the verify-cost calibration once the baseline's are set "
                       "aside; lower per_category, add prompts, or set verify_cost: baseline_slope.")


@dataclass(frozen=True)
class CalibrationRuns:
    """The two run folders :func:`measure_verify_cost` measured."""

    baseline_run: Path
    spec_run: Path


BASELINE_ON_LIVE = "verify-cost-baseline"  # the folder name of a baseline arm swept on a running server


def measure_calibration_baseline(
    live: LiveServer,
    target: ServerTarget,
    config: SweepConfig,
    *,
    prompts: Sequence[Prompt] | None = None,
    split_concurrency: Sequence[int] | None = None,
    outputs_root: str | Path,
    progress: bool = False,
) -> Path:
    """The calibration's baseline arm swept on ``live``, a server already running ``target``
    with speculation off (01-baseline's own: one server start fewer, and the calibration
    compares against the instance the baseline was measured on). Returns its run folder,
    ``outputs_root/verify-cost-baseline``, which :func:`measure_verify_cost` takes as
    ``baseline_run``."""
    if target.option.method != "baseline":
        raise SpeclabError("The calibration's baseline arm needs a server with speculation off.")
    plan = plan_per_category(config, prompts, split_concurrency)
    result = bench(target, config, name=BASELINE_ON_LIVE, run_dir=Path(outputs_root) / BASELINE_ON_LIVE,
                   plan=plan, progress=progress, live=live)
    return result.run_dir


def finished_calibration_baseline(outputs_root: str | Path) -> Path | None:
    """The baseline arm :func:`measure_calibration_baseline` left under ``outputs_root``,
    if it finished (an interrupted one is measured again)."""
    folder = Path(outputs_root) / BASELINE_ON_LIVE
    try:
        manifest = read_json(folder / MANIFEST)
    except SpeclabError:  # missing or unreadable: not finished
        return None
    return folder if manifest.get("status") == "ok" and (folder / PLAN_JSON).exists() else None


def measure_verify_cost(
    spec_target: ServerTarget,
    config: SweepConfig,
    *,
    baseline_target: ServerTarget | None = None,
    baseline_run: Path | None = None,
    prompts: Sequence[Prompt] | None = None,
    split_concurrency: Sequence[int] | None = None,
    name: str = "verify-cost",
    progress: bool = False,
    outputs_root: str | Path | None = None,
) -> CalibrationRuns:
    """Measure the cost of verifying drafts on real servers: a baseline and a speculative run.

    Runs one per-category plan (:func:`plan_per_category`; ``split_concurrency`` picks the
    levels split by category) twice: on ``baseline_target``
    (default: ``spec_target`` with speculation off) and on ``spec_target`` (a
    :class:`speclab.serve.target.ServerTarget` with a speculative option); each is a run folder
    of its own (:func:`speclab.predict.stepmodel.calibrate_from_runs` fits them). Use prompts other than the ones
    you will predict for, and the concurrencies you will predict at. ``baseline_run``: a
    finished baseline arm of this calibration (:func:`measure_calibration_baseline`); its
    plan is swept on ``spec_target`` and no baseline server is started.
    """
    if spec_target.option.method == "baseline":
        raise SpeclabError("measure_verify_cost needs a speculative option on spec_target (e.g. ngram).")
    if baseline_run is not None:
        plan = Plan.load(baseline_run)
        base_dir = Path(baseline_run)
    else:
        baseline_target = baseline_target or spec_target.model_copy(update={"option": SpecOption()})
        plan = plan_per_category(config, prompts, split_concurrency)
        base_dir = bench(baseline_target, config, name=f"{name}-baseline", plan=plan, progress=progress,
                         outputs_root=outputs_root).run_dir
    spec = bench(spec_target, config, name=f"{name}-{spec_target.option.method}", plan=plan, progress=progress,
                 outputs_root=outputs_root)
    return CalibrationRuns(base_dir, spec.run_dir)
