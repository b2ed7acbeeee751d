"""Replay vs the real embedded vLLM: the replayed counters must be the server's.

One per-category plan (every level one category) is run on a float32 baseline server and
on float32 n-gram and suffix servers (float32: batched verification leaves greedy outputs
bit-identical, so the replay sees the text the speculative server wrote). The n-gram pair
is made by :func:`speclab.measure.calibration.measure_verify_cost`, which this also tests.
"""

from __future__ import annotations

import fcntl
import math

import pandas as pd
import pytest

from speclab.measure.calibration import CalibrationRuns, measure_verify_cost, plan_per_category
from speclab.measure.loadgen import SweepConfig, bench
from speclab.predict.accuracy import compare_predicted_measured, compare_replay_with_server
from speclab.predict.compare import load_problems
from speclab.predict.modecost import instance_spread
from speclab.predict.replay import baseline_requests, replay_suffix
from speclab.predict.stepmodel import calibrate_from_runs
from speclab.runfolder import load_run
from speclab.serve.embedded import embedded_option
from speclab.serve.target import ServerTarget

pytestmark = pytest.mark.integration

CONFIG = SweepConfig(
    concurrency=[1, 2],
    categories=["code_editing", "summarization", "multi_turn", "math_reasoning"],
    per_category=2,
    max_tokens=96,
    # warm-up answers would enter the suffix cache unrecorded
    warmup_requests=0,
)


@pytest.fixture(scope="module")
def lock(tmp_path_factory: pytest.TempPathFactory):
    """The vLLM lock for the whole module; runs go to a temp folder (the autouse
    fixture that does that for tests is function-scoped, too late for module fixtures)."""
    with pytest.MonkeyPatch.context() as patch, open("/tmp/speclab-vllm.lock", "w") as handle:
        patch.setenv("SPECLAB_OUTPUTS", str(tmp_path_factory.mktemp("replay-outputs")))
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
        fcntl.flock(handle, fcntl.LOCK_UN)


def disturbance(runs: CalibrationRuns) -> list[str]:
    """What the product's own host-load check finds different between the two arms (or nothing)."""
    return load_problems({path.name: load_run(path).levels for path in (runs.baseline_run, runs.spec_run)})


@pytest.fixture(scope="module")
def calibration(lock):
    """The n-gram calibration pair, measured once more when the product calls the first pair
    contaminated: its fit can only be judged on arms measured on a host of one speed (CI of
    2026-12-04 13:46 UTC: the host probe read the baseline arm 24 % slower than the n-gram arm,
    with no foreign process, and the fit missed its points by up to 16 ms). The counter checks
    would hold either way; the timing checks would test the neighbour."""
    spec = ServerTarget(dtype="float32", option=embedded_option("ngram"))
    runs = measure_verify_cost(spec, CONFIG, name="it-replay")
    problems = disturbance(runs)
    if problems:
        print("the first calibration pair was disturbed, measuring it once more:", "; ".join(problems))
        runs = measure_verify_cost(spec, CONFIG, name="it-replay-again")
    return runs


def test_ngram_replay_reproduces_server_counters_per_category(calibration) -> None:
    table = compare_replay_with_server(calibration.baseline_run, calibration.spec_run)
    print(table.to_string())
    assert len(table) == 8 and table["categories"].str.count(",").eq(0).all()
    assert (table["outputs_identical"] == 1.0).all(), "float32 outputs diverged"
    assert (table["replay_drafts"] == table["server_drafts"]).all()
    assert (table["replay_draft_tokens"] == table["server_draft_tokens"]).all()
    # drafts running past max_tokens are compared by the server with tokens it never returns
    assert (table["replay_accepted"] <= table["server_accepted"]).all()
    assert (table["server_accepted"] <= table["replay_accepted_max"]).all()
    total_error = table["replay_accepted"].sum() / table["server_accepted"].sum() - 1
    assert abs(total_error) < 0.03


def test_verify_cost_calibration_is_a_sane_fit(calibration) -> None:
    # the fit is judged on arms the product calls comparable (measured once more if not, above)
    problems = disturbance(calibration)
    assert not problems, f"the host was disturbed in both calibration pairs: {problems}"
    model = calibrate_from_runs(calibration.baseline_run, calibration.spec_run)
    print(model.describe())
    points = model.points
    assert points is not None
    print(points.to_string())
    assert len(points) == 8
    # The per-token verify cost is host-dependent: on a fast host it is well above the noise, but on
    # a slower 2-core host 1-3 extra tokens cost less than the jitter and the non-negative fit rightly
    # lands on 0. What must hold everywhere: the fit is non-negative and explains the points.
    assert model.verify.per_token_s >= 0 and model.verify.overhead_s >= 0
    # The points compare two server instances, the baseline's and the n-gram's, and on this host class
    # one instance's speed spreads by about 9.5 % (A/A restarts, docs/history/2026-12-04.md): an offset
    # at each batch size, which a non-negative fit cannot take when the n-gram instance is the faster
    # (a run of 2026-12-04 read every point 8-12 ms under the fit). Within one concurrency the offset is
    # common; what is left is the fit's form, and it must explain each category's step to 10 % of a
    # step (the median, so one level disturbed by a neighbour is noise the fit need not chase).
    step_ms = 1000 * model.baseline_step_s(1)
    offsets = points.groupby("concurrency")["residual_ms"].transform("median")
    print("offset between the instances, ms, by concurrency:", offsets.unique().round(1).tolist())
    assert (points["residual_ms"] - offsets).abs().median() < 0.1 * step_ms, "the fit misses the measured step times"
    # ...and the offsets are the size of the instance spread: within 3 sd of two instances' difference
    data = load_run(calibration.baseline_run)
    sd, source = instance_spread(data.manifest.get("host"), data.server.get("dtype"), embedded=True)
    assert offsets.abs().max() < 3 * math.sqrt(2) * sd * step_ms, (sd, source)
    # a verified token costs at most a few baseline steps' worth on this CPU
    assert model.verify.per_token_s < 2 * model.baseline_step_s(1)
    # in-sample, priced with the instance spread a prediction carries (as 01 prices calibrate), the
    # measured speedups fall inside the intervals: every 'all' row, and at least 8 cells in 10
    model.instance_sd, model.instance_sd_source = sd, source
    table = compare_predicted_measured(calibration.baseline_run, calibration.spec_run, cost_model=model)
    print(table.to_string())
    assert table.loc[table["category"] == "all", "within_interval"].all()
    assert table["within_interval"].mean() >= 0.8


def test_suffix_replay_tracks_the_suffix_server(calibration, lock) -> None:
    plan = plan_per_category(CONFIG)
    target = ServerTarget(dtype="float32", option=embedded_option("suffix"))
    spec = bench(target, CONFIG, name="it-replay-suffix", plan=plan, progress=False)
    replay = replay_suffix(baseline_requests(calibration.baseline_run), target.option)
    table = compare_replay_with_server(calibration.baseline_run, spec.run_dir, option=target.option, replay=replay)
    print(replay.proposer_impl)
    print(table.to_string())
    table = table[table["outputs_identical"] == 1.0]
    assert len(table) >= 6
    totals = table[["replay_drafts", "server_drafts", "replay_accepted", "server_accepted"]].sum()
    assert totals["replay_drafts"] / totals["server_drafts"] == pytest.approx(1.0, abs=0.1)
    assert totals["replay_accepted"] / totals["server_accepted"] == pytest.approx(1.0, abs=0.1)
    assert isinstance(table, pd.DataFrame)
