"""The embedded head's scripts run through the server venv (speclab.eagle3.train): a failing one
shows its output without the progress lines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from speclab.errors import SpeclabError


@pytest.mark.usefixtures("no_progress_routing")
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
