"""The library's layers, enforced from the imports (docs/architecture.md).

vocabulary  <- analysis, measurement, server  <- workbook
Vocabulary imports only vocabulary; analysis reads recorded data and parameters only (no
measurement, server or workbook module); no import cycles between modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib"

LAYERS: dict[str, set[str]] = {
    # A package's __init__ that only names its modules imports nothing, so it sits at the bottom.
    "vocabulary": {"speclab", "errors", "urls", "options", "paths", "stats", "prompts", "runs",
                   "runfolder", "sections", "sweep", "auth", "outcome", "eagle3.corpus", "measure.progress",
                   "moe", "traffic", "eagle3", "predict", "measure", "serve", "report", "whatif"},
    "analysis": {"predict.replay", "predict.ngram_fast", "predict.costmodel", "predict.steptrace",
                 "predict.levelsim", "predict.predictions", "predict.compare", "predict.stepparts", "predict.ownsteps",
                 "predict.timings", "predict.stepmodel", "predict.accuracy", "predict.payback", "predict.modecost", "predict.configsearch",
                 "report.findings",
                 "profiling", "profiling.trace", "profiling.buckets", "profiling.analysis",
                 "profiling.plots", "profiling.hta", "eagle3.match", "eagle3.plan",
                 "moe.models", "moe.seeds", "moe.traces", "moe.plots", "predict.probefit", "traffic.logs",
                 "traffic.gen",
                 "traffic.tokens", "traffic.replay", "traffic.day", "traffic.plots",
                 "whatif.arch", "whatif.cases", "whatif.hardware", "whatif.plots", "whatif.predict", "whatif.scenario",
                 "whatif.seeds", "whatif.sensitivity", "whatif.step", "whatif.text"},
    "measurement": {"measure.client", "measure.client.records", "measure.client.sse",
                    "measure.client.fast", "measure.client.via_httpx", "measure.client.stream",
                    "measure.client.transport", "measure.client.harness", "measure.metrics",
                    "measure.summary", "measure.loadgen", "measure.identity", "measure.hostload",
                    "profiling.capture", "moe.bench", "measure.probe", "measure.selfcheck", "measure.calibration",
                    "measure.proposer"},
    "server": {"serve.launch", "serve.embedded", "serve.target", "eagle3.train", "moe.engine"},
    "workbook": {"params", "workbook", "report.decision", "report.plots", "report.caveats",
                 "report.explore", "report.tables", "report.formatting", "cli", "cli.kernels",
                 "cli.server", "cli.bench", "cli.workbook", "cli.__main__", "cli.traffic", "cli.whatif",
                 "eagle3.workbook", "moe.workbook", "traffic.workbook"},
}
ALLOWED = {
    "vocabulary": {"vocabulary"},
    "analysis": {"vocabulary", "analysis"},
    "measurement": {"vocabulary", "measurement", "server"},
    "server": {"vocabulary", "server", "measurement"},
    "workbook": set(LAYERS),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in (LIB / "speclab").rglob("*.py"):
        rel = path.relative_to(LIB / "speclab").with_suffix("")
        if rel.parts[0] == "scripts":
            continue  # run as scripts in other interpreters, never imported
        parts = [p for p in rel.parts if p != "__init__"]
        found[".".join(parts) or "speclab"] = path
    return found


def _imports(path: Path, known: set[str]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("speclab"):
            base = node.module.removeprefix("speclab").lstrip(".") or "speclab"
            names = [f"{base}.{a.name}" if base != "speclab" else a.name for a in node.names] + [base]
        elif isinstance(node, ast.Import):
            names = [a.name.removeprefix("speclab").lstrip(".") or "speclab" for a in node.names
                     if a.name.startswith("speclab")]
        out.update(n for n in names if n in known)
    return out


def _layer_of(module: str) -> str:
    for layer, members in LAYERS.items():
        if module in members:
            return layer
    raise AssertionError(f"speclab.{module} has no layer: add it to LAYERS in {__file__}")


def test_every_module_has_a_layer_and_imports_only_below_it() -> None:
    modules = _modules()
    wrong = []
    for module, path in modules.items():
        layer = _layer_of(module)
        for target in _imports(path, set(modules)):
            if target != module and _layer_of(target) not in ALLOWED[layer]:
                wrong.append(f"{module} ({layer}) imports {target} ({_layer_of(target)})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = defaultdict(set)
    for module, path in modules.items():
        graph[module] = {t for t in _imports(path, set(modules)) if t != module
                         and not module.startswith(t + ".") and t != "speclab"}
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join(trail + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + [nxt]))
    assert not cycles, "\n".join(sorted(set(cycles))[:10])


# Package rules the module layers cannot express: the report reads run folders only, so no module
# of report/ imports measurement or a server (docs/architecture.md, "How a notebook is built").
NEVER_BY_PACKAGE = {
    "report": {"measure", "serve", "workbook"},
    "predict": {"measure", "serve", "report", "workbook", "params"},
}


def test_packages_keep_their_nevers() -> None:
    modules = _modules()
    wrong = []
    for module, path in modules.items():
        package = module.split(".")[0]
        for target in _imports(path, set(modules)):
            if target.split(".")[0] in NEVER_BY_PACKAGE.get(package, set()):
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_the_report_module_never_imports_the_workbook_layer() -> None:
    code = ("import sys, speclab.report.decision, speclab.report.tables, speclab.report.formatting, speclab.report.findings; "
            "print(sorted(m for m in sys.modules if m in ('speclab.workbook', 'speclab.serve.embedded', "
            "'speclab.cli.workbook', 'speclab.report.explore')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
