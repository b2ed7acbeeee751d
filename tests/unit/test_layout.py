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


def _make_recipes() -> dict[str, str]:
    """Each Makefile target with its recipe lines joined."""
    recipes: dict[str, str] = {}
    current = None
    for line in (ROOT / "Makefile").read_text().splitlines():
        match = re.match(r"^([a-z][a-z-]+):", line)
        if match:
            current = match.group(1)
            recipes[current] = ""
        elif line.startswith("\t") and current:
            recipes[current] += line + "\n"
    return recipes


def test_every_benchmark_has_a_make_target_and_the_readme_says_which() -> None:
    recipes = _make_recipes()
    readme = (ROOT / "README.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    bench_targets = [t for t in recipes if t == "bench" or (t.startswith("bench-") and t != "bench-all")]
    for script in scripts:
        runners = [t for t in bench_targets if f"benchmarks/{script}" in recipes[t]]
        assert runners, f"no make target runs benchmarks/{script}"
        row = next((line for line in readme.splitlines() if line.startswith(f"| `benchmarks/{script}`")), None)
        assert row is not None, f"README's benchmark table has no row for {script}"
        assert f"`make {runners[0]}`" in row, f"README names the wrong target for {script}"
    assert set(recipes["bench-all"].split()) >= set(bench_targets), "make bench-all misses a benchmark target"
