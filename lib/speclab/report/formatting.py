"""Tables a person reads: pandas Stylers formatted from the units in the column names.

Every table speclab shows (in JupyterLab and in the exported HTML, which renders the same
Styler) goes through :func:`styled`: seconds become milliseconds, rates become percent,
speedups read ``1.36x [1.21, 1.53]`` when an interval exists, the index is hidden and the
verdict cells are coloured. The data frames themselves stay tidy and numeric; only the
display changes.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

# Verdict words are compare.FASTER / SLOWER / UNCLEAR / TOO_FEW (kept literal: no import
# cycle, and a test checks that they stay in step).
VERDICT_COLOURS = {
    "faster": "#c8e6c9",
    "slower": "#ffcdd2",
    "no clear difference": "#eeeeee",
    "too few prompts": "#fff3cd",
}
MISSING = "–"

# One look for every table: compact, striped, numbers right-aligned, headers that wrap.
TABLE_STYLES = [
    {"selector": "", "props": "border-collapse: collapse; font-size: 0.92em; margin: 0.4em 0 1em 0;"},
    {"selector": "caption", "props": "caption-side: top; text-align: left; font-weight: 600; padding: 0.3em 0;"},
    {"selector": "th", "props": "background: #f3f4f6; text-align: left; padding: 4px 8px; "
                                "border-bottom: 1px solid #c7c9cc; white-space: normal; max-width: 11em;"},
    {"selector": "td", "props": "padding: 3px 8px; border-bottom: 1px solid #e5e7eb; "
                                "font-variant-numeric: tabular-nums;"},
    {"selector": "tbody tr:nth-child(even)", "props": "background: #fafafa;"},
]

_ABBREVIATIONS = {"tpot": "TPOT", "ttft": "TTFT", "ttfa": "TTFA", "e2e": "E2E", "ci": "CI", "p99": "p99",
                  "k": "k", "id": "id", "gib": "GiB"}
_UNIT_SUFFIXES = (("_tok_s", "tok/s"), ("_ms", "ms"), ("_us", "µs"), ("_s", "s"), ("_pct", "%"),
                  ("_h", "h"), ("_gib", "GiB"), ("_bytes", "bytes"))
# Latencies read best in ms; durations and load times stay in seconds.
_TIME_S = re.compile(r"(^|_)(tpot|ttft|ttfa|itl|e2e|step|queue|lag)(_[a-z0-9]+)*_s(_[a-z0-9]+)*$")


def is_seconds(name: str) -> bool:
    """Whether a column holds a latency in seconds (``tpot_s_median``, ``e2e_s``), shown as ms."""
    return bool(_TIME_S.search(name)) and "tok_s" not in name


def header(name: str) -> str:
    """A readable header for a tidy column name: ``tpot_ms_median`` -> ``TPOT median (ms)``."""
    text = str(name)
    unit = None
    for suffix, label in _UNIT_SUFFIXES:
        token = suffix.lstrip("_")
        pattern = re.compile(rf"(^|_){re.escape(token)}(_|$)")
        if pattern.search(text):
            unit = label
            text = pattern.sub(lambda m: "_" if m.group(1) and m.group(2) else "", text, count=1)
            break
    words = [w for w in text.split("_") if w]
    words = [_ABBREVIATIONS.get(w, w) for w in words]
    label = " ".join(words) if words else str(name)
    return f"{label} ({unit})" if unit else label


def to_display_units(frame: pd.DataFrame) -> pd.DataFrame:
    """Seconds columns become milliseconds (``tpot_s_median`` -> ``tpot_ms_median``)."""
    out = frame.copy()
    renames = {}
    for column in out.columns:
        name = str(column)
        if is_seconds(name) and pd.api.types.is_numeric_dtype(out[column]):
            out[column] = out[column] * 1e3
            renames[column] = re.sub(r"_s(_|$)", r"_ms\1", name, count=1)
    return out.rename(columns=renames)


def interval_text(point: Any, low: Any, high: Any, suffix: str = "x") -> str:
    """``1.36x [1.21, 1.53]``; the point alone when the interval is missing."""
    if _missing(point):
        return MISSING
    text = f"{float(point):.2f}{suffix}"
    if not (_missing(low) or _missing(high)):
        text += f" [{float(low):.2f}, {float(high):.2f}]"
    return text


def with_intervals(frame: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Each point with its interval becomes one text column ``1.36x [1.21, 1.53]``.

    ``speedup`` + ``ci_low`` + ``ci_high`` (a measured, paired speedup) becomes
    ``speedup (95 % CI)``; any ``X`` + ``X_low`` + ``X_high`` (e.g. a predicted speedup's
    interval) becomes ``X (interval)``.
    """
    level = int(round(confidence * 100))
    pairs = [("speedup", "ci_low", "ci_high", f"speedup ({level} % CI)")] if {
        "speedup", "ci_low", "ci_high"} <= set(frame.columns) else []
    pairs += [(str(c), f"{c}_low", f"{c}_high", f"{c} (interval)") for c in frame.columns
              if f"{c}_low" in frame.columns and f"{c}_high" in frame.columns]
    out = frame
    for point, low, high, name in pairs:
        suffix = "x" if "speedup" in point else ""
        position = list(out.columns).index(point)
        text = [interval_text(p, lo, hi, suffix) for p, lo, hi in zip(out[point], out[low], out[high], strict=True)]
        out = out.drop(columns=[point, low, high])
        out.insert(min(position, len(out.columns)), name, text)
    return out


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _number(fmt: str) -> Callable[[Any], str]:
    def render(value: Any) -> str:
        if _missing(value):
            return MISSING
        if isinstance(value, str):
            return value
        number = float(value)
        if math.isinf(number):
            return "never" if number > 0 else "-∞"
        return fmt.format(number)

    return render


def _hours(value: Any) -> str:
    if _missing(value):
        return MISSING
    number = float(value)
    if math.isinf(number):
        return "never" if number > 0 else "-∞"
    return f"{number:.2g} h" if abs(number) < 10 else f"{number:,.0f} h"


def _numeric_objects(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns holding only numbers and missing values (None beside floats) become floats."""
    out = frame
    for column in frame.columns:
        values = frame[column]
        if values.dtype != object or values.isna().all():
            continue
        present = values.dropna()
        if present.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)).all():
            out = out.assign(**{str(column): pd.to_numeric(values, errors="coerce")}) if isinstance(column, str) else out
    return out


def _boolean(value: Any) -> str:
    if _missing(value):
        return MISSING
    return "yes" if bool(value) else "no"


def column_formatter(name: str, series: pd.Series) -> Callable[[Any], str] | None:
    """How one column is shown, chosen from its name (units) and dtype."""
    if pd.api.types.is_bool_dtype(series) or (series.dtype == object and series.dropna().map(
            lambda v: isinstance(v, bool)).all() and series.notna().any()):
        return _boolean
    if not pd.api.types.is_numeric_dtype(series):
        return None
    n = name.lower()
    if n.endswith("_pct") or "_pct_" in n:
        return _number("{:+.1f} %")
    if n == "share" or n.endswith(("_share", "_rate", "_perc", "_fraction")):
        return _number("{:.1%}")
    if "speedup" in n:
        return _number("{:.2f}x")
    if "_ms" in n or n.endswith("_us"):
        return _number("{:,.1f}")
    if n == "load_time_s" or n.endswith("load_s"):
        return _number("{:.0f} s")
    if "tok_s" in n:
        return _number("{:,.1f}")
    if n.endswith(("_h", "_hours", "hours")):
        return _hours
    if pd.api.types.is_integer_dtype(series):
        return _number("{:,.0f}")
    if n in ("concurrency", "requests", "pairs", "steps", "repeat", "rank") or n.endswith(("_tokens", "tokens")):
        return _number("{:,.0f}") if series.dropna().map(float.is_integer).all() else _number("{:,.1f}")
    return _number("{:,.3g}") if series.abs().max() < 1000 else _number("{:,.0f}")


def _verdict_css(value: Any) -> str:
    colour = VERDICT_COLOURS.get(str(value))
    return f"background-color: {colour}; text-align: left;" if colour else ""


def styled(frame: pd.DataFrame, *, caption: str | None = None, table_id: str | None = None,
           confidence: float = 0.95, convert_units: bool = True, max_rows: int | None = None) -> Styler:
    """The one look for every table: units from column names, intervals, verdict colours, no index.

    ``max_rows`` truncates long tables (the run folder keeps them whole).
    """
    # a default RangeIndex is noise; a named or meaningful index becomes ordinary columns
    table = frame.reset_index(drop=True) if isinstance(frame.index, pd.RangeIndex) else frame.reset_index()
    if isinstance(table.columns, pd.MultiIndex):  # a pivot: one header line per column
        table.columns = [" ".join(str(part) for part in column if str(part)) for column in table.columns]
    table = with_intervals(_numeric_objects(table), confidence)
    if convert_units:
        table = to_display_units(table)
    if max_rows is not None and len(table) > max_rows:
        table = table.head(max_rows)
    formatters = {c: f for c in table.columns if (f := column_formatter(str(c), table[c])) is not None}
    styler = table.style.format(formatters, na_rep=MISSING)
    styler = styler.format_index(lambda c: header(str(c)), axis="columns").hide(axis="index")
    if "verdict" in table.columns:
        styler = styler.map(_verdict_css, subset=["verdict"])
    # numbers right (digits line up), words left; per cell, since cell styles outrank table ones
    text_columns = [c for c in table.columns if c not in formatters or c == "verdict"
                    or str(c).endswith((" CI)", " (interval)"))]
    number_columns = [c for c in table.columns if c not in text_columns]
    if text_columns:
        styler = styler.set_properties(subset=text_columns, **{"text-align": "left"})
    intervals = [c for c in table.columns if str(c).endswith((" CI)", " (interval)"))]
    if intervals:
        styler = styler.set_properties(subset=intervals, **{"white-space": "nowrap"})
    if number_columns:
        styler = styler.set_properties(subset=number_columns, **{"text-align": "right"})
    styler = styler.set_table_styles(TABLE_STYLES, overwrite=False)
    if caption:
        styler = styler.set_caption(caption)
    if table_id:
        # the table's id becomes T_<table_id>: the Styler's CSS is keyed on that id
        styler = styler.set_uuid(table_id)
    return styler


def bullet_list(items: Iterable[str], *, css_class: str = "speclab-notes", empty: str = "None detected.") -> str:
    """Plain sentences as a styled HTML list (text escaped; wraps inside the page)."""
    entries = [html.escape(str(item)) for item in items] or [html.escape(empty)]
    rows = "".join(f"<li>{entry}</li>" for entry in entries)
    return (f'<ul class="{css_class}" style="margin: 0.3em 0 1em 1.2em; padding: 0; line-height: 1.45; '
            f'max-width: 60em; overflow-wrap: anywhere;">{rows}</ul>')
