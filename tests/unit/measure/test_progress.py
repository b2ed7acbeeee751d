"""Progress bars: where they go (here, the runner's terminal, nowhere), the script line format,
and a headless notebook run whose bars reach the terminal but never the notebook or its HTML."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speclab.errors import SpeclabError
from speclab.measure import progress


@pytest.fixture(autouse=True)
def _no_inherited_routing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (progress.QUIET_ENV, progress.FILE_ENV, progress.COLUMNS_ENV, progress.INTERVAL_ENV):
        monkeypatch.delenv(name, raising=False)


def test_where_a_bar_goes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert progress.destination(show=True) == "here"
    assert progress.destination(show=False) == "none"
    monkeypatch.setenv(progress.FILE_ENV, str(tmp_path / "bars.txt"))
    # a headless notebook's bar reaches the runner's terminal whatever `show` says
    assert progress.destination(show=False) == "relay"
    progress.set_quiet()
    try:
        assert progress.destination(show=True) == "none"
        assert progress.bar(total=3, desc="x").disable
    finally:
        progress.set_quiet(False)
    assert not progress.is_quiet()


def test_a_child_process_bar_is_relayed_to_the_terminal_with_its_eta(tmp_path: Path) -> None:
    """What a kernel started by `speclab run` does: its bar (show=False, as headless notebooks
    pass) lands in the runner's stream; the routing is undone afterwards."""
    terminal = io.StringIO()
    code = ("import time; from speclab.measure import progress\n"
            "with progress.bar(total=4, desc='sweep c=4', unit='req', show=False) as b:\n"
            "    for _ in range(4):\n"
            "        time.sleep(0.05); b.update(1)\n")
    env_lib = str(Path(progress.__file__).resolve().parents[2])
    with progress.relay_to_terminal(terminal, poll_s=0.05) as relay:
        assert relay is not None and os.environ[progress.FILE_ENV] == str(relay)
        subprocess.run([sys.executable, "-c", code], check=True,
                       env={**os.environ, "PYTHONPATH": env_lib})
    text = terminal.getvalue()
    assert "sweep c=4" in text and "4/4" in text and "req" in text
    assert "\r" not in text  # not a terminal: one line per redraw, readable in a log
    assert progress.FILE_ENV not in os.environ and not relay.exists()


def test_quiet_relays_nothing() -> None:
    progress.set_quiet()
    try:
        with progress.relay_to_terminal(io.StringIO()) as relay:
            assert relay is None and progress.FILE_ENV not in os.environ
    finally:
        progress.set_quiet(False)


def test_script_lines_become_bars_and_other_lines_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    follower = progress.LineFollower(show=True)
    for line in ["loading\n", progress.progress_line("target features", 0, 3, "sample") + "\n",
                 progress.progress_line("target features", 3, 3, "sample") + "\n",
                 progress.progress_line("training (wall-clock budget)", 120.0, 480, "s") + "\n",
                 "step 25 loss 3.1\n", "speclab-progress {not json\n"]:
        follower.feed(line)
    follower.close()
    err = capsys.readouterr().err
    assert "target features" in err and "3/3" in err and "training (wall-clock budget)" in err
    assert "120/480" in err  # seconds of the budget: the ETA is the budget's end
    assert follower.output() == "loading\nstep 25 loss 3.1\nspeclab-progress {not json\n"


def test_a_failing_script_shows_its_output_without_the_progress_lines(tmp_path: Path) -> None:
    from speclab.eagle3.train import _run_script

    script = tmp_path / "fails.py"
    script.write_text("import json, sys\n"
                      "print('speclab-progress ' + json.dumps({'desc': 'work', 'done': 1, 'total': 2, 'unit': 'it'}))\n"
                      "print('the real cause', flush=True)\nsys.exit(3)\n")
    with pytest.raises(SpeclabError) as failure:
        _run_script([str(script)], "The fake step", python=sys.executable, progress=False)
    assert failure.value.detail is not None
    assert "the real cause" in failure.value.detail and "speclab-progress" not in failure.value.detail


def test_a_headless_notebook_draws_its_bars_in_the_terminal_not_in_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import nbformat

    from speclab.cli import workbook

    source = tmp_path / "nb" / "98-bars.ipynb"
    source.parent.mkdir()
    cells = [nbformat.v4.new_code_cell("interactive = True", metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell(
                 "import time\nfrom speclab.measure import progress\n"
                 "for show in (interactive, True):\n"
                 "    with progress.bar(total=3, desc=f'relayed work {show}', unit='step', show=show) as b:\n"
                 "        for _ in range(3):\n"
                 "            time.sleep(0.05); b.update(1)\n"
                 "print('cell done')")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), source)
    monkeypatch.setattr(workbook, "notebook_path", lambda name: source)
    monkeypatch.setenv("PYTHONPATH", str(Path(progress.__file__).resolve().parents[2]))
    run_dir = workbook.run_notebook("98-bars", [], [], outputs_root=str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert "relayed work False" in err and "relayed work True" in err and "3/3" in err
    executed = (run_dir / "notebook.ipynb").read_text()
    html = (run_dir / "report.html").read_text()
    assert "cell done" in executed
    for text in (executed, html):  # the cell's source names the bars; no drawn bar is there
        assert "relayed work False" not in text and "relayed work True" not in text and "3/3" not in text

    progress.set_quiet()
    try:
        workbook.run_notebook("98-bars", [], [], outputs_root=str(tmp_path / "quiet"))
    finally:
        progress.set_quiet(False)
    assert "relayed work" not in capsys.readouterr().err


def test_a_server_start_shows_the_seconds_it_waited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from speclab.serve.launch import ManagedServer, ServerLaunch, free_port

    script = tmp_path / "server.py"
    script.write_text("import http.server, sys, time\ntime.sleep(1.5)\n"
                      "class H(http.server.BaseHTTPRequestHandler):\n"
                      "    def do_GET(self):\n        self.send_response(200); self.end_headers()\n"
                      "    def log_message(self, *a):\n        pass\n"
                      "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")
    port = free_port()
    monkeypatch.setattr(ServerLaunch, "command", lambda self: [sys.executable, str(script), str(port)])
    launch = ServerLaunch(model="m", port=port, python=sys.executable)
    with ManagedServer(launch, tmp_path / "server.log", health_timeout_s=30, progress=True):
        pass
    err = capsys.readouterr().err
    assert "starting the vllm server" in err and "1s" in err
    with ManagedServer(launch, tmp_path / "server.log", health_timeout_s=30):  # progress off: silent here
        pass
    assert "starting" not in capsys.readouterr().err
