"""Progress bars (speclab.measure.progress): where they go (here, the runner's terminal, nowhere)
and the script line format. The bars of a script run through the server venv, a headless
notebook and a server start are tested with those modules (eagle3/test_train.py,
cli/test_workbook.py, serve/test_launch.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speclab.measure import progress

pytestmark = pytest.mark.usefixtures("no_progress_routing")


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
