"""Reading run folders back: the report and later arms read these files, never variables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from speclab.errors import SpeclabError
from speclab.loadgen import SUMMARY_JSON, read_records
from speclab.runs import MANIFEST, list_runs, read_json


@dataclass
class RunData:
    """One run folder's manifest, requests (one row each) and levels (one row each)."""

    path: Path
    manifest: dict[str, Any]
    requests: pd.DataFrame
    levels: pd.DataFrame

    @property
    def kind(self) -> str:
        return str(self.manifest.get("kind"))

    @property
    def server(self) -> dict[str, Any]:
        return self.manifest.get("server") or {}

    @property
    def arm(self) -> str:
        """The option measured: baseline, ngram, suffix, ..."""
        if not self.levels.empty and "arm" in self.levels:
            return str(self.levels["arm"].iloc[0])
        return str((self.manifest.get("params") or {}).get("method") or "baseline")

    @property
    def label(self) -> str:
        spec = self.server.get("speculative_config") or {}
        k = spec.get("num_speculative_tokens")
        return f"{self.arm} k={k}" if k and self.arm != "baseline" else self.arm


def load_run(path: str | Path) -> RunData:
    """A run folder; a missing summary (crashed run) still gives whatever requests exist."""
    folder = Path(path)
    if not (folder / MANIFEST).exists():
        raise SpeclabError(f"{folder} is not a speclab run folder (no {MANIFEST}); check the path.")
    manifest = read_json(folder / MANIFEST)
    requests = pd.DataFrame(read_records(folder))
    levels = pd.DataFrame()
    if (folder / SUMMARY_JSON).exists():
        levels = pd.DataFrame(read_json(folder / SUMMARY_JSON).get("levels") or [])
    return RunData(folder, manifest, requests, levels)


def latest_run(kind: str, outputs_root: str | Path | None = None, *, status: str = "ok",
               where: dict[str, Any] | None = None) -> Path:
    """The newest run of ``kind`` that finished with ``status`` (and matches ``where`` params)."""
    for path in reversed(list_runs(outputs_root, kind=kind)):
        manifest = read_json(path / MANIFEST)
        if status and manifest.get("status") != status:
            continue
        params = manifest.get("params") or {}
        if where and any(params.get(k) != v for k, v in where.items()):
            continue
        return path
    hint = f" with {where}" if where else ""
    raise SpeclabError(f"No finished {kind} run{hint} under the outputs folder; run {kind} first.")
