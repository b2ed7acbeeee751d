"""Quiet, timed runs: no plain-TCP kernel warning, the demo's phases, tcmalloc set-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

from speclab.cli import kernels
from speclab.cli.workbook import phase_table

ROOT = Path(__file__).resolve().parents[2]


def test_kernel_settings_encrypt_or_leave_tcp() -> None:
    settings = kernels.kernel_settings()
    assert settings in ({"transport_encryption": "auto"}, {"transport": "ipc"})
    config = kernels.kernel_config()
    assert dict(config.KernelManager) == settings
    assert kernels.server_arguments() == [f"--KernelManager.{k}={v}" for k, v in settings.items()]


def test_a_kernel_started_our_way_does_not_warn_about_plain_tcp(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)
    script = ("import papermill, sys; from speclab.cli.kernels import kernel_config; "
              f"papermill.execute_notebook({str(source)!r}, {str(out)!r}, kernel_name='python3', "
              "progress_bar=False, config=kernel_config() if sys.argv[1] == 'quiet' else None)")
    quiet = subprocess.run([sys.executable, "-c", script, "quiet"], capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "without encryption" not in quiet.stderr
    assert nbformat.read(out, as_version=4).cells[0].outputs[0]["text"] == "42\n"
    # the warning is real without the settings (so the check above can fail)
    plain = subprocess.run([sys.executable, "-c", script, "plain"], capture_output=True, text=True, timeout=120)
    assert "without encryption" in plain.stderr


def test_phase_table_lists_each_phase_and_the_total() -> None:
    text = phase_table([("01-baseline (default)", 125.4), ("05-report (default)", 12.0)])
    lines = text.splitlines()
    assert lines[0].split() == ["01-baseline", "(default)", "2:05.4"]
    assert lines[1].split() == ["05-report", "(default)", "0:12.0"]
    assert lines[2].split() == ["total", "2:17.4"]


def _tcmalloc(lib: Path, path: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/bash", str(ROOT / "scripts/install-tcmalloc.sh")], capture_output=True, text=True,
                          timeout=60, env={"PATH": path, "SPECLAB_TCMALLOC_LIB": str(lib)})


def test_tcmalloc_setup_reports_a_present_library(tmp_path: Path) -> None:
    lib = tmp_path / "libtcmalloc_minimal.so.4"
    lib.write_bytes(b"")
    result = _tcmalloc(lib, "/usr/bin:/bin")
    assert result.returncode == 0 and result.stdout.strip() == f"tcmalloc ready: {lib}"


def test_tcmalloc_setup_says_how_when_it_cannot_install(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # `id` but no apt-get: the one-sentence instruction
    bin_dir.mkdir()
    (bin_dir / "id").symlink_to(subprocess.run(["bash", "-c", "command -v id"], capture_output=True,
                                               text=True).stdout.strip())
    result = _tcmalloc(tmp_path / "absent.so", str(bin_dir))
    assert result.returncode == 0  # never fails make setup
    assert result.stdout.strip().startswith("tcmalloc not installed (needs root and apt-get): run 'sudo apt-get "
                                            "install libtcmalloc-minimal4'")


def test_the_demo_times_drafter_training_as_its_own_phase_once(tmp_path, monkeypatch) -> None:
    from speclab.cli import workbook as cli_workbook
    from speclab.eagle3 import train as drafter_train

    calls = []
    monkeypatch.setattr(drafter_train, "trained_head_dir", lambda *a, **k: tmp_path)
    monkeypatch.setattr(drafter_train, "ensure_trained_head", lambda **k: calls.append(k) or tmp_path)
    phases: list = []
    cli_workbook._ensure_demo_drafter(phases)
    assert [name for name, _ in phases] == ["EAGLE-3 head training (first run only)"]
    assert calls and calls[0]["seconds"] == 480.0 and calls[0]["prompts"] == 280
    (tmp_path / "model.safetensors").write_bytes(b"")
    cli_workbook._ensure_demo_drafter(phases)  # cached: no second phase, no training
    assert len(phases) == 1 and len(calls) == 1
