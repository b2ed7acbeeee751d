"""The library's layers, enforced from the imports (docs/architecture.md).

vocabulary  <- analysis, measurement, server  <- workbook
Vocabulary imports only vocabulary; analysis reads recorded data and parameters only (no
measurement, server or workbook module); no import cycles between modules.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib"

LAYERS: dict[str, set[str]] = {
    "vocabulary": {"speclab", "errors", "urls", "options", "paths", "stats", "prompts", "runs",
                   "runfolder", "sections", "sweep", "auth", "outcome", "drafter_corpus"},
    "analysis": {"replay", "costmodel", "levelsim", "steptrace", "predict", "compare", "findings", "profiling", "profiling.trace",
                 "profiling.buckets", "profiling.analysis", "profiling.plots", "profiling.hta",
                 "drafter", "trainplan", "moe", "moe_traces", "moe_plots", "ngram_fast", "traffic_logs", "traffic_gen", "traffic_tokens",
                 "traffic_replay", "traffic", "traffic_plots"},
    "measurement": {"client", "client.records", "client.sse", "client.fast", "client.via_httpx",
                    "client.stream", "client.transport", "client.harness", "metrics", "summary",
                    "loadgen", "identity", "profiling.capture", "hostload", "moe_bench"},
    "server": {"server", "embedded", "target", "drafter_train", "moe_engine"},
    "workbook": {"params", "workbook", "calibration", "report", "plots", "explore", "tables", "formatting",
                 "kernels", "cli", "cli.server", "cli.bench", "cli.workbook", "cli.__main__", "workbook_eagle3",
                 "moe_workbook", "cli.traffic", "traffic_run"},
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
