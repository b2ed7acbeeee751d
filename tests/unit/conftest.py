"""Fixtures several unit-test folders share: recorded runs and traces read once per module."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = DATA / "traces"
RUNS = DATA / "predict"


@pytest.fixture(scope="module")
def stream_model():
    """The step model calibrated on the recorded float32 baseline and n-gram streams
    (tests/data/predict/stream-f32-*, made by scripts/stream_fixture.py)."""
    from speclab.predict.stepmodel import calibrate_from_runs

    return calibrate_from_runs(RUNS / "stream-f32-baseline", RUNS / "stream-f32-ngram")


@pytest.fixture(scope="module")
def gpu_report():
    """The recorded H200 trace of a small Qwen2-MoE (tests/data/traces/README.md), analysed."""
    from speclab.profiling import analyse_profile

    return analyse_profile(TRACES / "h200-qwen2moe")


@pytest.fixture(scope="module")
def cpu_report():
    """The recorded CPU trace of the embedded vLLM with n-gram speculation, analysed."""
    from speclab.profiling import analyse_profile

    return analyse_profile(TRACES / "vllm-cpu-ngram")


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny tokenizer model folder (tests/fakes/tiny_tokenizer.py)."""
    from tests.fakes.tiny_tokenizer import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("model"))


@pytest.fixture
def no_progress_routing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress bars routed as in a plain terminal, whatever the environment the tests run in says
    (quiet, relayed to a file, a width or an interval of its own)."""
    from speclab.measure import progress

    for name in (progress.QUIET_ENV, progress.FILE_ENV, progress.COLUMNS_ENV, progress.INTERVAL_ENV):
        monkeypatch.delenv(name, raising=False)
