"""Statistics and bookkeeping that must not mislead: pairing, outcome, secrets, input checks."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.measure.client import default_timeouts
from speclab.measure.loadgen import SweepConfig, check_before_sweep, plan_sweep
from speclab.outcome import assess_levels
from speclab.predict.compare import losslessness, pair_requests, paired_speedups
from speclab.prompts import Prompt
from speclab.runs import Run, check_run_dir, redact, redact_argv
from speclab.urls import Endpoint, strip_credentials, strip_credentials_in_text


def arm(name: str, copies: int, e2e: list[float]) -> pd.DataFrame:
    rows = [{"concurrency": 1, "repeat": 0, "prompt_id": "p1", "category": "c", "ok": True,
             "output_tokens": 10, "e2e_s": e2e[i], "tpot_s": 0.1, "ttft_s": 0.01,
             "send_time_s": float(i), "token_ids": [1, 2, i], "text": f"t{i}",
             "request_id": f"{name}-L0-p1" + (f"-copy{i}" if i else "")} for i in range(copies)]
    return pd.DataFrame(rows)


def test_repeated_prompts_pair_once_each_not_as_a_cartesian_product() -> None:
    base = arm("baseline", 4, [1.0, 1.1, 1.2, 1.3])
    # the treatment finished its copies in another order: pairing follows the plan's copy number
    treat = arm("ngram", 4, [0.5, 0.55, 0.6, 0.65]).iloc[[2, 0, 3, 1]]
    pairs = pair_requests(base, treat)
    assert len(pairs) == 4  # was 16
    assert sorted(pairs["occurrence"]) == [0, 1, 2, 3]
    assert (pairs["e2e_s_treat"] * 2 == pairs["e2e_s_base"]).all()
    assert paired_speedups(base, treat)["pairs"].iloc[0] == 4
    assert len(losslessness(base, treat)) == 4


def test_a_failed_copy_does_not_shift_the_pairing() -> None:
    base = arm("baseline", 3, [1.0, 1.1, 1.2])
    treat = arm("ngram", 3, [0.5, 0.55, 0.6])
    treat.loc[0, "ok"] = False
    pairs = pair_requests(base, treat).sort_values("occurrence")
    assert list(pairs["occurrence"]) == [1, 2]
    assert list(pairs["e2e_s_base"]) == [1.1, 1.2]


def test_a_small_prompt_file_is_reused_visibly() -> None:
    prompts = [Prompt(id="a", category="mine", messages=[{"role": "user", "content": "hi"}])]
    plan = plan_sweep(SweepConfig(concurrency=[1], per_category=3), prompts)
    assert len(plan.requests) == 3
    assert plan.reused_prompts
    assert any("3 times within one level" in note for note in plan.notes)


@pytest.mark.parametrize("levels,status", [
    ([{"requests": 10, "errors": 0}], "ok"),
    ([{"requests": 100, "errors": 5}], "ok"),
    ([{"requests": 100, "errors": 6, "truncated": 6}], "degraded"),
    ([{"requests": 4, "errors": 4, "error_examples": ["HTTP 503: busy"]}], "failed"),
    ([{"requests": 4, "errors": 4}, {"requests": 4, "errors": 0}], "degraded"),
    ([], "failed"),
])
def test_the_outcome_follows_the_records(levels: list[dict], status: str) -> None:
    outcome = assess_levels(levels)
    assert outcome.status == status
    assert (outcome.sentence is None) == (status == "ok")


def test_a_degraded_sweep_stays_degraded_when_the_notebook_finalises_ok(tmp_path: Path) -> None:
    run = Run.create("x", {}, run_dir=tmp_path / "run")
    run.update(outcome=assess_levels([{"requests": 10, "errors": 5}]).to_dict())
    run.finalize("ok")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "degraded" and "5 of 10 requests failed" in manifest["error"]


def test_credentials_are_used_but_never_shown() -> None:
    ep = Endpoint.parse("http://bob:s3cret@gpu:8000/v1")
    assert ep.credentials == ("bob", "s3cret")
    assert str(ep) == ep.public == "http://gpu:8000" and "s3cret" not in repr(ep)
    assert ep.without_credentials().api("models") == "http://gpu:8000/v1/models"
    assert strip_credentials("https://u:p@h/x") == "https://h/x"
    assert strip_credentials_in_text("GET http://u:p@h:1/v1 failed") == "GET http://h:1/v1 failed"
    assert redact({"target": {"endpoint": "http://u:p@h"}, "api_key_env": "MY_KEY", "api_key": "k"}) == {
        "target": {"endpoint": "http://h"}, "api_key_env": "MY_KEY", "api_key": "<redacted>"}
    assert redact_argv(["--endpoint", "http://u:p@h", "--api-key", "k"]) == [
        "--endpoint", "http://h", "--api-key", "<redacted>"]


def test_bad_input_is_refused_before_any_server_or_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpeclabError, match="is a file"):
        check_run_dir(tmp_path / "file")
    with pytest.raises(SpeclabError, match="lies under the file"):
        check_run_dir(tmp_path / "file" / "run")
    monkeypatch.delenv("NO_SUCH_KEY_16", raising=False)
    with pytest.raises(SpeclabError, match="NO_SUCH_KEY_16"):
        check_before_sweep(SweepConfig(api_key_env="NO_SUCH_KEY_16"), run_dir=tmp_path / "run")
    with pytest.raises(SpeclabError, match="open files"):
        check_before_sweep(SweepConfig(concurrency=[10**9]), run_dir=tmp_path / "run")
    with pytest.raises(SpeclabError, match="Unknown category"):
        check_before_sweep(SweepConfig(categories=["nope"]), run_dir=tmp_path / "run")
    with pytest.raises(ValueError, match="finite"):
        SweepConfig(rate=float("inf"))
    assert not (tmp_path / "run").exists()


def test_default_timeouts_grow_with_max_tokens() -> None:
    idle_short, deadline_short = default_timeouts(16)
    idle_long, deadline_long = default_timeouts(4096)
    assert deadline_short < deadline_long and idle_short <= deadline_short
    assert idle_long == 300.0 and deadline_long > 600


def test_calibration_takes_prompts_it_can_use(tmp_path: Path) -> None:
    from speclab.measure.calibration import calibration_prompts, plan_per_category

    own = tmp_path / "mine.jsonl"
    own.write_text("".join(json.dumps({"id": f"m{i}", "category": "mine",
                                       "messages": [{"role": "user", "content": f"q{i}"}]}) + "\n"
                           for i in range(3)))
    baseline = plan_sweep(SweepConfig(prompts=str(own), categories=["mine"], per_category=2, concurrency=[1]))
    chosen = calibration_prompts(str(own), ["mine"], set(baseline.prompts))
    assert [p.id for p in chosen.prompts] == ["m2"] and "did not use" in chosen.said  # the file's leftover
    assert not chosen.builtin
    # a baseline that used the whole file: the built-in sets stand in (this used to stop
    # after the whole baseline with "No prompts were selected")
    everything = plan_sweep(SweepConfig(prompts=str(own), categories=["mine"], per_category=3, concurrency=[1]))
    chosen = calibration_prompts(str(own), ["mine"], set(everything.prompts))
    pool = chosen.prompts
    assert pool and all(p.category != "mine" for p in pool) and "built-in" in chosen.said and chosen.builtin
    assert plan_per_category(SweepConfig(per_category=1, concurrency=[1]), pool).requests
    with pytest.raises(SpeclabError, match="No prompt is left"):
        calibration_prompts(str(own), ["mine"], set(everything.prompts) | {p.id for p in pool})


def test_no_method_to_predict_is_refused_when_the_parameters_are_read() -> None:
    from speclab.params import BaselineParams

    with pytest.raises(SpeclabError, match="predict_methods"):
        BaselineParams.validate_values({"predict_methods": [], "verify_cost": "baseline_slope"})


def test_a_full_disk_does_not_leave_the_run_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import speclab.runs

    run = Run.create("x", {}, run_dir=tmp_path / "run")

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(speclab.runs, "write_json", disk_full)
    with pytest.raises(OSError), run.recording():
        disk_full()  # e.g. appending a record
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["status"] == "failed"


def test_speclab_run_hands_the_notebook_no_password(monkeypatch: pytest.MonkeyPatch) -> None:
    from speclab.options import SpecOption
    from speclab.params import BaselineParams
    from speclab.urls import ENDPOINT_URL_ENV, hide_credentials

    monkeypatch.delenv(ENDPOINT_URL_ENV, raising=False)
    shown = hide_credentials("http://bob:s3cret@gpu:8000/v1")
    assert shown == "http://gpu:8000/v1"  # what papermill writes into the executed notebook
    params = BaselineParams.validate_values({"mode": "external", "endpoint": shown,
                                             "verify_cost": "baseline_slope"})
    assert params.target(SpecOption()).endpoint == "http://bob:s3cret@gpu:8000/v1"  # the kernel's request URL
    other = BaselineParams.validate_values({"mode": "external", "endpoint": "http://other:8000",
                                            "verify_cost": "baseline_slope"})
    assert other.target(SpecOption()).endpoint == "http://other:8000"


def test_reasoning_streamed_is_counted_when_the_server_reports_zero() -> None:
    # vLLM 0.32 counts reasoning only between <think> and </think> in the generated ids; a
    # template that opens the thought in the prompt gets reasoning_tokens 0 in usage
    # (seen on the embedded reasoning variant). The stream's exact per-chunk split wins.
    from speclab.measure.client import RequestSpec, StreamAccumulator

    def event(**delta: object) -> bytes:
        return json.dumps(delta).encode()

    acc = StreamAccumulator(RequestSpec(request_id="r", prompt_id="p", messages=[]), send_perf=0.0, t0=0.0)
    acc.http_status = 200
    usage = {"prompt_tokens": 5, "completion_tokens": 0, "completion_tokens_details": {"reasoning_tokens": 0}}
    for i, (key, text) in enumerate([("reasoning", "Paris"), ("content", ""), ("content", " the"),
                                     ("content", " city")], start=1):
        delta = {key: text} if text else {}
        acc.feed(0.1 * i, event(choices=[{"index": 0, "delta": delta, "finish_reason": None}],
                                usage={**usage, "completion_tokens": i}))
    acc.feed(0.5, event(choices=[], usage={**usage, "completion_tokens": 4}))
    acc.feed(0.5, b"[DONE]")
    rec = acc.finish()
    assert rec.ok and rec.output_tokens == 4
    assert rec.reasoning_tokens == 1 and rec.answer_tokens == 3  # not 0 and 4
    assert rec.ttfa_s == pytest.approx(0.3) and rec.ttft_s == pytest.approx(0.1)
