"""05-report: the decision, assembled from run folders only (never another notebook's state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from speclab import compare
from speclab import workbook as wb
from speclab.errors import SpeclabError
from speclab.params import ReportParams
from speclab.runfolder import RunData, latest_run, load_run
from speclab.runs import list_runs, read_json

VERDICT_COLOURS = {compare.FASTER: "#c8e6c9", compare.SLOWER: "#ffcdd2", compare.UNCLEAR: "#eeeeee"}


@dataclass
class ReportBundle:
    baseline: RunData
    options: list[RunData]
    comparisons: dict[str, pd.DataFrame] = field(default_factory=dict)
    confidence: float = 0.95

    @property
    def runs(self) -> list[RunData]:
        return [self.baseline, *self.options]


def _option_runs_for(baseline: Path, outputs_root: str | None) -> list[Path]:
    """The latest finished 02 run per method that repeated this baseline."""
    latest: dict[str, Path] = {}
    for path in list_runs(outputs_root, kind="02-ngram"):
        manifest = read_json(path / "manifest.json")
        if manifest.get("status") != "ok":
            continue
        if Path(str(manifest.get("baseline_run"))).resolve() != baseline.resolve():
            continue
        latest[str(manifest.get("method"))] = path
    return list(latest.values())


def collect(params: ReportParams) -> ReportBundle:
    """Load the baseline and option runs and compute the paired comparisons."""
    baseline_dir = Path(params.baseline_run) if params.baseline_run else latest_run("01-baseline", params.outputs_root)
    baseline = load_run(baseline_dir)
    option_dirs = [Path(p) for p in params.option_runs] if params.option_runs else _option_runs_for(
        baseline_dir, params.outputs_root)
    if not option_dirs:
        raise SpeclabError(
            f"No finished 02-ngram run repeats the baseline {baseline_dir}; run 02-ngram first "
            "or list option_runs.")
    options = [load_run(p) for p in option_dirs]
    bundle = ReportBundle(baseline, options, confidence=params.confidence)
    for option in options:
        bundle.comparisons[option.label] = compare.paired_speedups(
            baseline.requests, option.requests, confidence=params.confidence,
            n_resamples=params.bootstrap_resamples)
    return bundle


def _level_value(run: RunData, concurrency: int, key: str) -> Any:
    if run.levels.empty or key not in run.levels:
        return None
    rows = run.levels[run.levels["concurrency"] == concurrency][key].dropna()
    return float(rows.mean()) if len(rows) else None


def decision_rows(bundle: ReportBundle) -> pd.DataFrame:
    """Option x concurrency: the numbers behind each verdict, as plain data."""
    rows = []
    for option in bundle.options:
        table = bundle.comparisons[option.label]
        for cell in table[table["category"] == "all"].to_dict("records"):
            c = cell["concurrency"]
            rows.append({
                "option": option.label,
                "concurrency": c,
                "baseline_tok_s": _level_value(bundle.baseline, c, "output_tok_s"),
                "option_tok_s": _level_value(option, c, "output_tok_s"),
                "speedup": cell["speedup"],
                "ci_low": cell["ci_low"],
                "ci_high": cell["ci_high"],
                "acceptance_rate": _level_value(option, c, "acceptance_rate"),
                "mean_acceptance_length": _level_value(option, c, "mean_acceptance_length"),
                "server_load_s": (option.server or {}).get("load_time_s"),
                "verdict": cell["verdict"],
            })
    return pd.DataFrame(rows)


def decision_table(bundle: ReportBundle) -> Any:
    """The decision table, styled for the HTML report (verdict cells coloured)."""
    frame = decision_rows(bundle)
    if frame.empty:
        return frame
    level = int(round(bundle.confidence * 100))
    frame = frame.rename(columns={"ci_low": f"ci{level}_low", "ci_high": f"ci{level}_high"})
    styled = frame.style.set_caption("Decision table: option × concurrency").format(
        {"baseline_tok_s": "{:.1f}", "option_tok_s": "{:.1f}", "speedup": "{:.2f}x",
         f"ci{level}_low": "{:.2f}", f"ci{level}_high": "{:.2f}", "acceptance_rate": "{:.1%}",
         "mean_acceptance_length": "{:.2f}", "server_load_s": "{:.0f} s"}, na_rep="-")
    styled = styled.map(lambda v: f"background-color: {VERDICT_COLOURS.get(v, 'white')}", subset=["verdict"])
    styled = styled.set_table_attributes('id="decision-table" class="speclab-decision"').hide(axis="index")
    return styled


def headline(bundle: ReportBundle) -> str:
    """Two or three sentences a busy reader can act on."""
    rows = decision_rows(bundle)
    if rows.empty:
        return "No paired measurements."
    sentences = []
    for option, cells in rows.groupby("option", sort=False):
        faster = cells[cells["verdict"] == compare.FASTER]["concurrency"].tolist()
        slower = cells[cells["verdict"] == compare.SLOWER]["concurrency"].tolist()
        best = cells.loc[cells["speedup"].idxmax()]
        parts = [f"**{option}**: best {best['speedup']:.2f}x at concurrency {int(best['concurrency'])}"]
        if faster:
            parts.append(f"faster at concurrency {', '.join(map(str, faster))}")
        if slower:
            parts.append(f"**slower** at concurrency {', '.join(map(str, slower))}")
        if not faster and not slower:
            parts.append("no clear difference at any concurrency")
        categories = bundle.comparisons[option]
        wins = categories[(categories["category"] != "all") & (categories["verdict"] == compare.FASTER)]
        if not wins.empty:
            top = wins.loc[wins["speedup"].idxmax()]
            parts.append(f"largest category win {top['speedup']:.2f}x on {top['category']} "
                         f"(concurrency {int(top['concurrency'])})")
        sentences.append("; ".join(parts) + ".")
    return " ".join(sentences)


def all_category_comparisons(bundle: ReportBundle) -> pd.DataFrame:
    """Every option's per-category comparison in one table (category prefixed by option)."""
    frames = []
    for label, table in bundle.comparisons.items():
        part = table.copy()
        if len(bundle.comparisons) > 1:
            part["category"] = label + ": " + part["category"]
        frames.append(part)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def category_table(bundle: ReportBundle) -> pd.DataFrame:
    """Per option x category x concurrency: speedup, CI, verdict."""
    frames = [t[t["category"] != "all"].assign(option=label) for label, t in bundle.comparisons.items()]
    if not frames:
        return pd.DataFrame()
    frame = pd.concat(frames, ignore_index=True)
    cols = ["option", "category", "concurrency", "pairs", "speedup", "ci_low", "ci_high", "verdict",
            "base_tpot_s_median", "treat_tpot_s_median"]
    return frame[cols]


def identities(bundle: ReportBundle) -> pd.DataFrame:
    """The servers side by side, one column per run."""
    columns = {}
    for run in bundle.runs:
        table = wb.identity_table(run.server or None)
        columns[f"{run.label} ({run.path.name})"] = table.set_index("field")["value"] if not table.empty else pd.Series(dtype=str)
    return pd.DataFrame(columns)


def predictions(bundle: ReportBundle) -> pd.DataFrame:
    """Predicted (from the baseline alone) vs measured decode speedup per option and concurrency."""
    frames = [wb.predicted_vs_measured(bundle.baseline, option).assign(option=option.label)
              for option in bundle.options]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    cols = ["option", "category", "concurrency", "predicted_acceptance_rate", "measured_acceptance_rate",
            "predicted_speedup", "measured_speedup", "error_pct", "cost_model_fit"]
    return table[table["category"] == "all"][[c for c in cols if c in table]].reset_index(drop=True)


def caveats(bundle: ReportBundle) -> list[str]:
    """Everything detected that should temper the verdicts."""
    notes = wb.caveats(bundle.runs)
    for option in bundle.options:
        table = compare.losslessness(bundle.baseline.requests, option.requests)
        dtype = (option.server or {}).get("dtype")
        verdict = compare.losslessness_verdict(table, dtype)
        if not verdict.startswith("Lossless"):
            notes.append(f"{option.label}: {verdict}")
        small = bundle.comparisons[option.label]
        few = small[(small["category"] != "all") & (small["pairs"] < 3)]
        if not few.empty:
            notes.append(f"{option.label}: {len(few)} category cells rest on fewer than 3 prompt pairs: "
                         "raise per_category for tighter intervals.")
    return notes


def predicted_losers(bundle: ReportBundle) -> pd.DataFrame:
    """The baseline's own predictions (01-baseline), with the options predicted to lose first."""
    path = bundle.baseline.path / wb.PREDICTIONS_PARQUET
    if not path.exists():
        return pd.DataFrame({"note": ["the baseline run made no predictions (predict_methods was empty)"]})
    predicted = wb.prediction_summary(pd.read_parquet(path))
    return predicted.sort_values(["loses", "option", "concurrency"], ascending=[False, True, True]).reset_index(drop=True)
