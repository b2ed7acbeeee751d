"""The project's shape: environment.yml in step with pyproject, make help complete."""

import re
import subprocess
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {"jupyterlab", "papermill", "httpx", "pandas", "seaborn", "ipywidgets"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def test_environment_yml_mirrors_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(p for p in pip if p != "-e .") == sorted(wanted)
    assert "-e ." in pip
    assert {_name(r) for r in project["dependencies"]} >= REQUIRED
    assert project["scripts"]["speclab"] == "speclab.cli:main"
    assert "dev" in project["optional-dependencies"]


def test_make_help_lists_every_target() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]+):", makefile, re.M))
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    listed = set(re.findall(r"make (\S+)", out))
    assert targets == listed


def test_layout_exists() -> None:
    for path in ("notebooks", "lib/speclab", "params", "outputs/README.md", "environment.yml",
                 "tests", ".ci/run", "README.md"):
        assert (ROOT / path).exists(), path
