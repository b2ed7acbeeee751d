"""Cross-check speclab's trace reading against HolisticTraceAnalysis (PyPI ``HolisticTraceAnalysis``).

HTA is the reference analyser of torch.profiler traces (docs/measurement.md section 5). Both read the
same files; per kernel name (or per CPU op name on CPU-only traces) the summed durations
and counts must agree. HTA rounds timestamps to whole microseconds by default (its
``HTA_DISABLE_NS_ROUNDING`` switch turns that off); ``exact=True`` compares unrounded.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd

from speclab.errors import SpeclabError
from speclab.profiling.trace import KIND_NAMES, RankTrace, find_trace_files, read_trace

GPU_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")
CPU_KINDS = ("cpu_op",)


def hta_available() -> bool:
    try:
        import hta  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def speclab_name_totals(trace: RankTrace, kinds: Sequence[str]) -> pd.DataFrame:
    """Summed duration (inclusive) and count per name, for events of the given kinds."""
    codes = [KIND_NAMES.index(k) for k in kinds]
    ops = trace.ops[trace.ops["kind"].isin(codes)]
    grouped = ops.groupby("name_id").agg(time_us=("dur_us", "sum"), count=("dur_us", "size")).reset_index()
    grouped["name"] = [trace.names[i] for i in grouped["name_id"]]
    grouped.insert(0, "rank", trace.rank)
    return grouped[["rank", "name", "time_us", "count"]]


def hta_name_totals(
    files: Sequence[str | Path], kinds: Sequence[str], *, exact: bool = True
) -> tuple[pd.DataFrame, float]:
    """Per rank and name: HTA's summed duration and count, and the seconds HTA took to load."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        raise SpeclabError(
            "The HTA cross-check needs HolisticTraceAnalysis: pip install HolisticTraceAnalysis."
        ) from None
    with tempfile.TemporaryDirectory(prefix="speclab-hta-") as tmp:
        # HTA reads a whole folder: give it exactly these files
        for path in files:
            source = Path(path).resolve()
            os.symlink(source, Path(tmp) / source.name)
        started = time.perf_counter()
        with _env("HTA_DISABLE_NS_ROUNDING", "1" if exact else None):
            analyzer = TraceAnalysis(trace_dir=tmp)
        seconds = time.perf_counter() - started
    symbols = analyzer.t.symbol_table
    names = symbols.get_sym_table()
    ids = symbols.get_sym_id_map()
    cat_ids = [ids[k] for k in kinds if k in ids]
    frames = []
    for rank, df in analyzer.t.traces.items():
        chosen = df[df["cat"].isin(cat_ids)]
        grouped = chosen.groupby("name").agg(time_us=("dur", "sum"), count=("dur", "size")).reset_index()
        grouped["name"] = [names[i] for i in grouped["name"]]
        grouped.insert(0, "rank", int(rank))
        frames.append(grouped[["rank", "name", "time_us", "count"]])
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["rank", "name", "time_us", "count"])
    return table, seconds


def compare_with_hta(
    source: str | Path | Sequence[str | Path],
    *,
    kinds: Sequence[str] | None = None,
    exact: bool = True,
    include_frontend: bool = False,
) -> pd.DataFrame:
    """One row per rank and name with speclab's and HTA's totals and their difference.

    ``kinds`` defaults to GPU kernels, copies and sets when the traces hold kernels, CPU ops
    otherwise. The frame's ``attrs`` carry both tools' load times in seconds.
    """
    files = find_trace_files(source, include_frontend)
    started = time.perf_counter()
    traces = [read_trace(p) for p in files]
    speclab_s = time.perf_counter() - started
    if kinds is None:
        kinds = GPU_KINDS if any(t.has_kernels for t in traces) else CPU_KINDS
    ours = pd.concat([speclab_name_totals(t, kinds) for t in traces], ignore_index=True)
    theirs, hta_s = hta_name_totals(files, kinds, exact=exact)
    merged = ours.merge(theirs, on=["rank", "name"], how="outer", suffixes=("_speclab", "_hta"))
    merged = merged.rename(columns={"time_us_speclab": "speclab_us", "time_us_hta": "hta_us",
                                    "count_speclab": "speclab_count", "count_hta": "hta_count"})
    merged[["speclab_us", "hta_us"]] = merged[["speclab_us", "hta_us"]].fillna(0.0)
    merged[["speclab_count", "hta_count"]] = merged[["speclab_count", "hta_count"]].fillna(0).astype(int)
    merged["diff_us"] = merged["speclab_us"] - merged["hta_us"]
    scale = merged[["speclab_us", "hta_us"]].abs().max(axis=1).where(lambda s: s > 0, 1.0)
    merged["rel_diff"] = merged["diff_us"].abs() / scale
    merged = merged.sort_values(["rank", "hta_us"], ascending=[True, False]).reset_index(drop=True)
    merged.attrs.update({"speclab_read_s": speclab_s, "hta_load_s": hta_s, "kinds": list(kinds)})
    return merged


def hta_agrees(comparison: pd.DataFrame, *, rtol: float = 1e-6, atol_us: float = 1e-3) -> bool:
    """True when every name's count matches and its total is within tolerance."""
    counts_ok = (comparison["speclab_count"] == comparison["hta_count"]).all()
    totals_ok = ((comparison["diff_us"].abs() <= atol_us) | (comparison["rel_diff"] <= rtol)).all()
    return bool(counts_ok and totals_ok)
