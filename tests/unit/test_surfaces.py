"""Every package's surface is complete: each of its modules is named in its ``__all__`` (or, where
``__all__`` re-exports names, in its docstring) and in docs/architecture.md's tree. A module
added without a place in the map fails here (as httpx's exported-members test does)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = ROOT / "lib" / "speclab"


def _packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE_ROOT.rglob("__init__.py")
                  if p.parent != PACKAGE_ROOT and "scripts" not in p.parts and "data" not in p.parts)


def _modules(package: Path) -> list[str]:
    names = [p.stem for p in package.glob("*.py") if p.stem != "__init__" and not p.stem.startswith("_")]
    names += [p.name for p in package.iterdir() if (p / "__init__.py").exists()]
    return sorted(names)


def _surface(package: Path) -> tuple[set[str], str]:
    tree = ast.parse((package / "__init__.py").read_text())
    exported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            exported = {e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)}
    return exported, ast.get_docstring(tree) or ""


def _tree_line(package: Path) -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```")[1]  # the tree is the page's first code block
    rel = package.relative_to(PACKAGE_ROOT).as_posix()
    lines = [line for line in block.splitlines() if line.strip().startswith(f"{package.name}/")]  # nested: indented
    assert lines, f"docs/architecture.md's tree has no line for {rel}/"
    return lines[0]


def test_every_module_is_on_its_package_surface_and_in_the_tree() -> None:
    missing = []
    for package in _packages():
        exported, doc = _surface(package)
        line = _tree_line(package)
        for module in _modules(package):
            if module not in exported and f"``{module}``" not in doc and f"``{module}/``" not in doc:
                missing.append(f"{package.name}/{module}: not in __all__ nor the package docstring")
            if not re.search(rf"(?<![\w.]){re.escape(module)}(?![\w])", line):
                missing.append(f"{package.name}/{module}: not in docs/architecture.md's tree line")
        for name in exported:
            if name.islower() and name not in _modules(package) and (package / f"{name}.py").exists() is False \
                    and not any(name in (package / f"{m}.py").read_text() for m in _modules(package)
                                if (package / f"{m}.py").exists()):
                missing.append(f"{package.name}.__all__ names {name}, which is neither a module nor defined there")
    assert not missing, "\n".join(missing)
