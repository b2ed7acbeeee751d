"""``speclab run`` (one notebook through papermill) and ``speclab demo`` (the whole workbook)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from speclab.errors import SpeclabError
from speclab.params import NOTEBOOK_PARAMS, load_params_file, parse_override
from speclab.paths import repo_root
from speclab.runs import Run, new_run_dir

# The demo's sequence on the embedded default: (notebook, params file, label).
DEMO_SEQUENCE = (
    ("00-profile", "params/00-profile/default.yaml"),
    ("01-baseline", "params/01-baseline/demo.yaml"),
    ("02-ngram", "params/02-ngram/default.yaml"),
    ("02-ngram", "params/02-ngram/suffix.yaml"),
    ("03-eagle3-drafter", "params/03-eagle3-drafter/default.yaml"),
    ("04-moespec", "params/04-moespec/default.yaml"),
    ("05-report", "params/05-report/default.yaml"),
)
# A demo run that predicts with speculative mode's cost measured by the demo's latest run of
# another notebook (02's spec_mode_overhead_from): the suffix run learns from the n-gram run's steps.
DEMO_LEARNS = {"params/02-ngram/suffix.yaml": "02-ngram"}


def notebook_path(name: str) -> Path:
    """notebooks/<name>.ipynb of the checkout, with one clear sentence when absent."""
    folder = repo_root() / "notebooks"
    path = folder / f"{name.removesuffix('.ipynb')}.ipynb"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.ipynb")))
        raise SpeclabError(f"No notebook {name!r} in {folder}; choose one of: {known}.")
    return path


def merge_params(notebook: str, files: list[str], overrides: list[str]) -> tuple[dict[str, Any], str]:
    """Params from YAML files (in order) then key=value overrides, validated before anything runs."""
    merged: dict[str, Any] = {}
    label = ""
    for item in files:
        merged.update(load_params_file(item))
        label = label or Path(item).stem
    for item in overrides:
        key, value = parse_override(item)
        merged[key] = value
    model = NOTEBOOK_PARAMS.get(notebook)
    if model is not None:
        model.validate_values(merged)
    return merged, label or "default"


def export_html(notebook_file: Path, html_file: Path) -> Path:
    """A code-free HTML report (no input cells, images embedded) from an executed notebook,
    every secret value hidden (`urls.strip_credentials_in_text`)."""
    import nbformat
    from nbconvert import HTMLExporter

    from speclab.urls import strip_credentials_in_text

    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nbformat.read(notebook_file, as_version=4))
    html_file.write_text(strip_credentials_in_text(body))
    return html_file


def _scrub(value: Any) -> Any:
    from speclab.urls import strip_credentials_in_text

    if isinstance(value, str):
        return strip_credentials_in_text(value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):  # embedded images are base64, never text a key could sit in
        return {k: v if str(k).startswith("image/") else _scrub(v) for k, v in value.items()}
    return value


def scrub_notebook(notebook_file: Path) -> bool:
    """Hide every secret value from an executed notebook's cells and outputs (a key a cell
    printed, an error that quoted a header); returns whether anything changed."""
    import json

    text = notebook_file.read_text()
    notebook = json.loads(text)
    clean = _scrub(notebook)
    if clean == notebook:
        return False
    notebook_file.write_text(json.dumps(clean, indent=1, ensure_ascii=False) + "\n")
    return True


def run_notebook(notebook: str, files: list[str], overrides: list[str], *,
                 outputs_root: str | None = None, progress: bool = False) -> Path:
    """Execute one notebook into a new dated run folder; return the folder.

    The folder holds notebook.ipynb (executed), report.html and manifest.json. A notebook
    that fails still leaves its partial notebook, its HTML and every measured record.
    """
    import papermill

    from speclab.cli.kernels import kernel_config
    from speclab.measure import progress as bars
    from speclab.urls import hide_credentials, strip_credentials_in_text

    source = notebook_path(notebook)
    params, label = merge_params(source.stem, files, overrides)
    # A password in the endpoint must not land in the executed notebook: the kernel gets it
    # from its environment instead.
    if params.get("endpoint"):
        params["endpoint"] = hide_credentials(params["endpoint"])
    if outputs_root:
        params.setdefault("outputs_root", outputs_root)
    model = NOTEBOOK_PARAMS.get(source.stem)
    if model is not None:  # bad input is one sentence, and leaves no run folder behind
        from speclab.workbook import check_notebook_inputs

        check_notebook_inputs(model.validate_values(params))
    run_dir = new_run_dir(f"{source.stem}-{label}", params.get("outputs_root"))
    params["run_dir"] = str(run_dir)
    params.setdefault("interactive", False)
    run = Run.create(source.stem, params, kind=source.stem, run_dir=run_dir)
    run.update(notebook=str(source), runner="speclab run", params_files=files, overrides=overrides)
    executed = run_dir / "notebook.ipynb"
    error: str | None = None
    try:
        # the kernel's bars (sweeps, training, calibration) reach this terminal, not the notebook
        with bars.relay_to_terminal():
            papermill.execute_notebook(str(source), str(executed), parameters=params, progress_bar=progress,
                                       cwd=str(source.parent), kernel_name="python3", config=kernel_config())
    except papermill.PapermillExecutionError as exc:
        error = strip_credentials_in_text(str(exc.evalue).strip().splitlines()[0] if exc.evalue else exc.ename)
    except KeyboardInterrupt:
        if executed.exists():
            scrub_notebook(executed)
        Run.open(run_dir).finalize("interrupted", "interrupted by the user")
        raise
    if executed.exists():
        scrub_notebook(executed)
    html = export_html(executed, run_dir / "report.html") if executed.exists() else None
    final = Run.open(run_dir)
    final.manifest["report_html"] = str(html) if html else None
    if error:
        final.finalize("failed", error)
        raise SpeclabError(f"{source.stem} stopped: {error} (partial notebook, HTML and data in {run_dir})")
    if final.manifest.get("status") != "ok":
        final.finalize("ok")
    else:
        final.save()
    return run_dir


def cmd_run(args: argparse.Namespace) -> int:
    files = [p for p in args.params if p.endswith((".yaml", ".yml"))]
    overrides = [p for p in args.params if not p.endswith((".yaml", ".yml"))]
    run_dir = run_notebook(args.notebook, files, overrides, outputs_root=args.outputs)
    print(f"notebook: {run_dir / 'notebook.ipynb'}")
    print(f"report:   {run_dir / 'report.html'}")
    return 0


def run_demo(outputs_root: str | None = None, skip: tuple[str, ...] = (),
             phases: list[tuple[str, float]] | None = None) -> Path:
    """The whole workbook on the embedded default; returns the final report's run folder.

    ``phases`` (when given) receives (notebook and params, wall seconds) per notebook run.
    """
    last: Path | None = None
    done: dict[str, Path] = {}  # each notebook's latest run of this demo
    if "03-eagle3-drafter" not in skip:
        _ensure_demo_drafter(phases)
    for notebook, params_file in DEMO_SEQUENCE:
        if notebook in skip or not (repo_root() / "notebooks" / f"{notebook}.ipynb").exists():
            continue
        print(f"speclab demo: {notebook} with {params_file} ...", flush=True)
        started = time.perf_counter()
        learns = DEMO_LEARNS.get(params_file)
        overrides = [f"spec_mode_overhead_from={done[learns]}"] if learns in done else []
        last = run_notebook(notebook, [str(repo_root() / params_file)], overrides, outputs_root=outputs_root)
        done[notebook] = last
        if phases is not None:
            phases.append((f"{notebook} ({Path(params_file).stem})", time.perf_counter() - started))
        print(f"  -> {last}", flush=True)
    if last is None:
        raise SpeclabError("The demo found no notebooks to run; check the notebooks/ folder.")
    return last


def _ensure_demo_drafter(phases: list[tuple[str, float]] | None) -> None:
    """03's trained head, built before the notebooks (once; cached), timed as a phase of its own."""
    from speclab.eagle3.train import ensure_trained_head, trained_head_dir
    from speclab.params import Eagle3Params

    recipe = Eagle3Params.validate_values(load_params_file(repo_root() / "params/03-eagle3-drafter/default.yaml"))
    head = trained_head_dir(recipe.head_prompts, recipe.head_train_seconds, recipe.head_max_tokens)
    if (head / "model.safetensors").exists():
        return
    print("speclab demo: training the EAGLE-3 head for 03 (first time only; cached) ...", flush=True)
    started = time.perf_counter()
    ensure_trained_head(seconds=recipe.head_train_seconds, prompts=recipe.head_prompts,
                        max_tokens=recipe.head_max_tokens)
    if phases is not None:
        phases.append(("EAGLE-3 head training (first run only)", time.perf_counter() - started))


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


def phase_table(phases: list[tuple[str, float]]) -> str:
    """Wall time per phase and in total, as aligned text lines (m:ss)."""
    width = max([len(name) for name, _ in phases] + [5])
    lines = [f"  {name:<{width}}  {_clock(seconds):>8}" for name, seconds in phases]
    lines.append(f"  {'total':<{width}}  {_clock(sum(s for _, s in phases)):>8}")
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    phases: list[tuple[str, float]] = []
    try:
        final = run_demo(args.outputs, tuple(args.skip or ()), phases)
    finally:
        if phases:
            print("\nspeclab demo: wall time by phase (m:ss)\n" + phase_table(phases), flush=True)
    print(f"\nreport: {final / 'report.html'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute one notebook with papermill into a dated run folder + HTML")
    p.add_argument("notebook", help="e.g. 01-baseline")
    p.add_argument("-p", "--params", action="append", default=[],
                   help="a params YAML file, or key=value (repeatable; later wins)")
    p.add_argument("--outputs", default=None, help="outputs root (default: outputs/)")
    p.add_argument("--quiet", action="store_true", help="no progress bars (they go to this terminal, never the report)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="run the whole workbook on the embedded server; prints the report path")
    p.add_argument("--outputs", default=None, help="outputs root (default: outputs/)")
    p.add_argument("--skip", action="append", help="notebook to skip (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress bars (they go to this terminal, never the report)")
    p.set_defaults(func=cmd_demo)
