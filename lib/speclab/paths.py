"""Where speclab's things live: the checkout, the model cache, the server venv's interpreter.

Vocabulary for every layer (imports nothing of speclab): the run folders find ``outputs/``
here, and the suffix replay finds the interpreter that has ``arctic-inference``.
"""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The checkout speclab runs from (editable install), else the working directory."""
    candidate = Path(__file__).resolve().parents[2]
    if (candidate / "pyproject.toml").exists() and (candidate / "notebooks").exists():
        return candidate
    return Path.cwd()


def cache_dir() -> Path:
    """Where converted models and drafter heads live (``SPECLAB_CACHE`` or ~/.cache/speclab)."""
    root = os.environ.get("SPECLAB_CACHE") or Path.home() / ".cache" / "speclab"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def server_python() -> Path:
    """The embedded server venv's interpreter (``SPECLAB_SERVER_PYTHON`` overrides)."""
    override = os.environ.get("SPECLAB_SERVER_PYTHON")
    if override:
        return Path(override)
    venv = os.environ.get("SPECLAB_SERVER_VENV") or repo_root() / ".venv-server"
    return Path(venv) / "bin" / "python"
