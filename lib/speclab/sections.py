"""Report sections: what a notebook run leaves in its folder for 05-report to show.

A run that the report should summarise (a profile, a drafter run, the MoE what-if, a traffic
replay) writes one section: a few plain sentences, named tidy tables and named figures, under
``<run>/report_section/``. The report reads these files only, so it never imports the code
that produced them and a section renders the same way for every notebook.

Layout: ``report_section/section.json`` (kind, title, summary sentences, the order of tables
and figures), one ``<name>.parquet`` per table and one ``<name>.png`` per figure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from speclab.errors import SpeclabError
from speclab.urls import strip_credentials_in_text

SECTION_DIR = "report_section"
SECTION_JSON = "section.json"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass
class Section:
    """One notebook run's contribution to the report."""

    kind: str
    title: str
    summary: list[str]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    run_id: str = ""


def _check_name(name: str) -> str:
    if not _NAME.match(name):
        raise SpeclabError(f"Section item name {name!r} must be lower-case letters, digits, '-' or '_'.")
    return name


def write_section(run_dir: str | Path, *, kind: str, title: str, summary: list[str],
                  tables: dict[str, pd.DataFrame] | None = None,
                  figures: dict[str, Any] | None = None,
                  notes: list[str] | None = None) -> Path:
    """Write the run's section; figures are matplotlib Figures (saved as PNG) or PNG paths.

    Rewriting replaces the previous section of the same run. Returns the section folder.
    """
    folder = Path(run_dir) / SECTION_DIR
    folder.mkdir(parents=True, exist_ok=True)
    table_names = []
    for name, frame in (tables or {}).items():
        frame.reset_index(drop=True).to_parquet(folder / f"{_check_name(name)}.parquet", index=False)
        table_names.append(name)
    figure_names = []
    for name, fig in (figures or {}).items():
        target = folder / f"{_check_name(name)}.png"
        if isinstance(fig, (str, Path)):
            target.write_bytes(Path(fig).read_bytes())
        else:
            fig.savefig(target, dpi=110, bbox_inches="tight")
        figure_names.append(name)
    meta = {"schema": 1, "kind": kind, "title": title,
            "summary": [strip_credentials_in_text(str(s)) for s in summary],
            "notes": [strip_credentials_in_text(str(n)) for n in (notes or [])],
            "tables": table_names, "figures": figure_names}
    (folder / SECTION_JSON).write_text(json.dumps(meta, indent=2))
    return folder


def read_section(run_dir: str | Path) -> Section | None:
    """The run's section, or None when the run wrote none."""
    run = Path(run_dir)
    meta_file = run / SECTION_DIR / SECTION_JSON
    if not meta_file.exists():
        return None
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as exc:
        raise SpeclabError(f"{meta_file} is not valid JSON (line {exc.lineno}); rerun that notebook.") from None
    folder = meta_file.parent
    tables = {name: pd.read_parquet(folder / f"{name}.parquet") for name in meta.get("tables", [])
              if (folder / f"{name}.parquet").exists()}
    figures = {name: folder / f"{name}.png" for name in meta.get("figures", [])
               if (folder / f"{name}.png").exists()}
    return Section(kind=str(meta.get("kind")), title=str(meta.get("title")),
                   summary=list(meta.get("summary") or []), tables=tables, figures=figures,
                   notes=list(meta.get("notes") or []), run_id=run.name)
