"""JupyterLab driven by a real browser: 02-ngram with smoke params, every cell run from the UI.

Playwright (PyPI) drives the system Chromium (never a downloaded browser). The test starts
JupyterLab on a free port, opens a copy of 02-ngram whose parameters papermill prepared
(smoke params, interactive on, the session's smoke baseline), runs all cells, and checks
that the measurement's progress bar and the ipywidgets explorer render and respond, that no
cell errored, and that the kernel never warned about plain-TCP transport. A screenshot goes
to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speclab.cli.kernels import server_arguments

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
RUN_ALL_TIMEOUT_S = 300  # a server start and two smoke levels on 2 loaded cores


def _chromium() -> str | None:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def _prepare_notebook(folder: Path, baseline: Path, outputs: Path) -> Path:
    """02-ngram with its smoke params injected the way papermill does, not executed."""
    import papermill

    from speclab.cli.workbook import merge_params

    params, _ = merge_params("02-ngram", [str(ROOT / "params/02-ngram/smoke.yaml")],
                             [f"baseline_run={baseline}", f"outputs_root={outputs}"])
    params["interactive"] = True  # the progress bar and the explorer are the point here
    target = folder / "02-ngram.ipynb"
    papermill.execute_notebook(str(ROOT / "notebooks/02-ngram.ipynb"), str(target), parameters=params,
                               prepare_only=True, progress_bar=False)
    return target


def _start_lab(folder: Path, port: int, token: str, log: Path) -> subprocess.Popen:
    settings = folder / ".lab-settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    # no "Jupyter news?" toast over the screenshot
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false"}))
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(folder / ".lab-workspaces")}
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
               "--expose-app-in-browser", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               *server_arguments()]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI runs as root
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def _wait_for_lab(lab: subprocess.Popen, port: int, token: str, log: Path, timeout_s: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if lab.poll() is not None:
            pytest.fail(f"JupyterLab exited with {lab.returncode}:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/status", params={"token": token}, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer within {timeout_s:.0f} s:\n{log.read_text()[-2000:]}")


def _stop(lab: subprocess.Popen) -> None:
    """SIGTERM lets the server shut its kernels down (and they their vLLM servers)."""
    if lab.poll() is None:
        lab.terminate()
        try:
            lab.wait(60)
        except subprocess.TimeoutExpired:
            lab.kill()
            lab.wait(10)


@pytest.mark.integration
@pytest.mark.notebook
@pytest.mark.timeout(600, func_only=True)  # waiting for the shared vLLM lock is not the test
def test_02_ngram_runs_in_jupyterlab_in_a_real_browser(tmp_path: Path, smoke_baseline: Path,
                                                        vllm_lock: None) -> None:
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no Chromium at /usr/bin/chromium or on PATH (apt-get install chromium); "
                    "the browser test drives the system browser and never downloads one")
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
    from speclab.serve.launch import free_port

    folder = tmp_path / "lab"
    folder.mkdir()
    outputs = tmp_path / "outputs"
    notebook = _prepare_notebook(folder, smoke_baseline, outputs)
    port, token, log = free_port(), secrets.token_hex(16), tmp_path / "jupyterlab.log"
    lab = _start_lab(folder, port, token, log)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "jupyterlab-02-ngram.png"
    try:
        _wait_for_lab(lab, port, token, log)
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_FLAGS[1:])
            page = browser.new_page(viewport={"width": 1400, "height": 1500})
            try:
                page.goto(f"http://127.0.0.1:{port}/lab/tree/{notebook.name}?token={token}")
                page.wait_for_function("window.jupyterapp !== undefined", timeout=90_000)
                page.wait_for_selector(".jp-NotebookPanel", timeout=90_000)
                page.wait_for_function(
                    "() => { const w = window.jupyterapp.shell.currentWidget;"
                    " const k = w && w.sessionContext && w.sessionContext.session"
                    " && w.sessionContext.session.kernel; return k && k.status === 'idle'; }",
                    timeout=90_000)
                page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
                # the last cell prints the run's id; an error stops the run before it
                page.wait_for_function(
                    "() => document.body.innerText.includes('ngram run: ')"
                    " || document.querySelector('.jp-OutputArea-output[data-mime-type="
                    "\"application/vnd.jupyter.stderr\"] .ansi-red-fg') !== null",
                    timeout=RUN_ALL_TIMEOUT_S * 1000)
                failed = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                                      ":has(.ansi-red-fg)")
                if failed.count():
                    page.screenshot(path=str(shot), full_page=True)
                    pytest.fail(f"a cell failed in JupyterLab:\n{failed.first.inner_text()[-3000:]}")

                bars = page.locator(".widget-hprogress .progress-bar")
                assert bars.count() >= 2, "one tqdm progress bar per measured level"
                assert page.locator(".widget-hprogress .progress-bar-success").count() == bars.count()

                explorer = page.locator(".speclab-explorer")
                explorer.wait_for(state="visible", timeout=30_000)
                picks = explorer.locator("select")
                assert picks.count() == 4  # baseline, option, category, concurrency
                picks.nth(2).select_option("translation")  # the category picker: the output follows
                page.wait_for_function(
                    "() => { const out = document.querySelector('.speclab-explorer .widget-output');"
                    " return out && out.innerText.includes('translation')"
                    " && !out.innerText.includes('code_editing'); }", timeout=60_000)
                explorer.scroll_into_view_if_needed()
                page.screenshot(path=str(shot), full_page=True)

                page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
                page.wait_for_timeout(1500)
            finally:
                browser.close()
    finally:
        _stop(lab)

    executed = json.loads(notebook.read_text())
    errors = [o.get("ename", "") + ": " + o.get("evalue", "") for c in executed["cells"]
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors == []
    assert all(c.get("execution_count") for c in executed["cells"] if c["cell_type"] == "code")
    assert "without encryption" not in log.read_text()
    assert shot.exists() and shot.stat().st_size > 30_000
