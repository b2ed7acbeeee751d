"""05-report: the decision, assembled from run folders only (never another notebook's state).

The report opens with one recommended action, then one decision record per option (what
was predicted before the restart, what was measured with its interval, acceptance, the
restart's cost and payback, the verdict and the caveats that apply), the decision table,
a speedup heatmap per option and the sections other notebooks left in their run folders
(profile, drafter, MoE, traffic replay). Nothing here imports the workbook layer: every
input is a file under ``outputs/``.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from pandas.io.formats.style import Styler

from speclab.errors import SpeclabError
from speclab.params import BaselineParams, ReportParams
from speclab.predict import compare
from speclab.report import caveats, formatting, plots, tables
from speclab.report.caveats import Caveat, Kind
from speclab.runfolder import MANIFEST, RunData, latest_run, load_run
from speclab.runs import list_runs, read_json
from speclab.sections import Section, read_section

VERDICT_COLOURS = formatting.VERDICT_COLOURS
# Sections of other notebooks, in reading order; kinds not listed follow alphabetically.
SECTION_ORDER = ("profile", "eagle3", "drafter", "moe", "traffic")


@dataclass
class ReportBundle:
    baseline: RunData
    options: list[RunData]
    comparisons: dict[str, pd.DataFrame] = field(default_factory=dict)
    confidence: float = 0.95
    outputs_root: str | None = None

    @property
    def runs(self) -> list[RunData]:
        return [self.baseline, *self.options]


# Options the baseline's replay can predict (the model-free proposers).
REPLAYABLE_METHODS = ("ngram", "suffix")


def _option_runs_for(baseline: Path, outputs_root: str | None) -> list[Path]:
    """The latest finished option run (02-ngram, 03-eagle3-drafter) per method that repeated this baseline."""
    latest: dict[str, Path] = {}
    paths = list_runs(outputs_root, kind="02-ngram") + list_runs(outputs_root, kind="03-eagle3-drafter")
    for path in sorted(paths, key=lambda p: (p.parent.name, p.name)):
        manifest = read_json(path / MANIFEST)
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
            f"No finished 02-ngram or 03-eagle3-drafter run repeats the baseline {tables.run_id(baseline_dir)}; run 02-ngram first "
            "or list option_runs.")
    options = [load_run(p) for p in option_dirs]
    bundle = ReportBundle(baseline, options, confidence=params.confidence, outputs_root=params.outputs_root)
    for option in options:
        bundle.comparisons[option.label] = compare.paired_speedups(
            baseline.requests, option.requests, confidence=params.confidence,
            n_resamples=params.bootstrap_resamples,
            instance_sd=tables.instance_spread(baseline, option, params.instance_sd))
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
                "restart_s": restart_cost(bundle, option)[0],
                "verdict": cell["verdict"],
            })
    return tables.mark_load(pd.DataFrame(rows), bundle.runs)


def decision_table(bundle: ReportBundle) -> Styler | pd.DataFrame:
    """The decision table, styled: speedup with its interval, verdict cells coloured."""
    frame = decision_rows(bundle)
    if frame.empty:
        return frame
    return formatting.styled(frame, caption="Decision table: option × concurrency", table_id="decision-table",
                             confidence=bundle.confidence)


# --------------------------------------------------------------------------- decision records


@dataclass
class DecisionRecord:
    """Everything a reader needs to decide on one option, on one screen."""

    option: str
    run: str  # run id of the option's measurement
    baseline_run: str
    measured: pd.DataFrame  # per concurrency: predicted and measured speedup, acceptance, verdict
    restart_s: float | None
    restart_source: str
    payback_h: float | None  # of the baseline's expected traffic; inf = never
    traffic: list[dict[str, float]]
    verdict: str  # one sentence
    caveats: list[str]
    prediction_note: str = ""


def _traffic(baseline: RunData) -> list[dict[str, float]]:
    """The expected day the baseline run was given (01-baseline's ``traffic`` param)."""
    traffic = (baseline.manifest.get("params") or {}).get("traffic")
    if not traffic:
        traffic = BaselineParams.model_fields["traffic"].default
    return [dict(t) for t in traffic]


def restart_cost(bundle: ReportBundle, option: RunData) -> tuple[float | None, str]:
    """Seconds one restart into ``option`` costs, and where the figure comes from, by the rule
    01 uses too (:func:`speclab.predict.payback.restart_cost_s`): the baseline's
    ``restart_minutes`` when given, else the load time measured when speclab started the
    option's server (else the baseline's), else unknown."""
    from speclab.predict.payback import restart_cost_s

    given = (bundle.baseline.manifest.get("params") or {}).get("restart_minutes")
    return restart_cost_s(given, (option.server or {}).get("load_time_s"),
                          (bundle.baseline.server or {}).get("load_time_s"))


def measured_payback(bundle: ReportBundle, option: RunData) -> float | None:
    """Hours of the baseline's expected traffic until restarting into ``option`` pays back,
    at the measured speedups (None when no restart cost is known)."""
    from speclab.predict.payback import payback_hours

    load_s, _ = restart_cost(bundle, option)
    rows = decision_rows(bundle)
    rows = rows[(rows["option"] == option.label) & rows["speedup"].notna()]
    if not load_s or rows.empty:
        return None
    speedups = dict(zip(rows["concurrency"].astype(float), rows["speedup"].astype(float), strict=True))
    table = payback_hours(float(load_s), speedups, _traffic(bundle.baseline))
    return float(table["payback_hours"].iloc[-1])


def _predicted_before(bundle: ReportBundle, option: RunData) -> tuple[pd.DataFrame, str]:
    """Per concurrency: what the baseline predicted for this option (before any restart),
    and the predicted-vs-measured decode error; with a note on where the numbers come from."""
    empty = pd.DataFrame(columns=["concurrency"])
    if option.arm not in REPLAYABLE_METHODS:
        return empty, f"{option.arm}: predicted offline by its own notebook (see its section), not by the baseline"
    try:
        pvm = tables.predicted_vs_measured(bundle.baseline, option)
    except SpeclabError as exc:
        return empty, f"no prediction: {exc.message}"
    pvm = pvm[pvm["category"] == "all"]
    if pvm.empty:
        return empty, "no prediction for this option"
    label = str(pvm["option"].iloc[0])
    saved = tables.read_predictions(bundle.baseline)
    before = saved[(saved["option"] == label) & (saved["category"] == "all")] if saved is not None else None
    # the error is computed from these two, which the record shows beside it
    error = pvm[["concurrency", "predicted_speedup", "measured_speedup", "error_pct"]].rename(columns={
        "predicted_speedup": "predicted_decode_speedup_at_measured_mix",
        "measured_speedup": "measured_decode_speedup", "error_pct": "prediction_error_pct"})
    if before is not None and not before.empty:
        keep = [c for c in ("concurrency", "predicted_speedup", "predicted_speedup_low", "predicted_speedup_high",
                            "acceptance_rate", "spec_mode_overhead_ms", "widest_part", "widest_part_break_even_ms")
                if c in before]  # the interval where the predictor gives one, and speculative mode's parts
        frame = before[keep].rename(
            columns={"acceptance_rate": "predicted_acceptance_rate"}).merge(error, on="concurrency", how="left")
        note = (f"Predicted by the baseline run before any restart ({label}). The error compares the decode speedup "
                "(TPOT) predicted at the batch mix the option really ran with (predicted_decode_speedup_at_measured_mix) "
                "with the measured decode speedup; both are shown beside it. Speculative mode's own cost is the sum "
                "of its labelled parts (01's mode-cost table); widest_part_break_even_ms is what its widest part may "
                "cost before the option stops winning.")
    else:
        frame = error.merge(pvm[["concurrency", "predicted_acceptance_rate"]], on="concurrency", how="left")
        frame.insert(1, "predicted_speedup", frame["predicted_decode_speedup_at_measured_mix"])
        note = (f"The baseline saved no prediction for {label}; shown: the baseline's replay + cost model "
                f"at the option's measured batch mix ({pvm['cost_model_fit'].iloc[0]}), and the measured decode "
                "speedup the error compares it with.")
    return frame, note


def _verdict_sentence(option: str, rows: pd.DataFrame, payback_h: float | None) -> str:
    """One sentence: where the option was faster or slower, and whether its restart pays back."""
    faster = rows[rows["verdict"] == compare.FASTER]["concurrency"].astype(int).tolist()
    slower = rows[rows["verdict"] == compare.SLOWER]["concurrency"].astype(int).tolist()
    parts = []
    if faster:
        parts.append(f"faster at concurrency {_levels(faster)}")
    if slower:
        parts.append(f"slower at concurrency {_levels(slower)}")
    if not parts:
        parts.append("not measurably different from the baseline at any concurrency tested")
    text = f"{option} was " + " and ".join(parts)
    if payback_h is not None:
        if not math.isfinite(payback_h):
            text += "; at the measured speedups its restart never pays back for the expected traffic"
        elif faster:
            text += f"; at the measured speedups its restart pays back after {_hours(payback_h)} of the expected traffic"
        else:  # a payback from point estimates no interval supports is not a payback
            text += (f"; its point estimates would pay the restart back after {_hours(payback_h)} of the expected "
                     "traffic, but no measured interval clears 1, so no payback is claimed")
    return text + "."


def _levels(values: list[int]) -> str:
    return ", ".join(str(v) for v in values[:-1]) + (" and " if len(values) > 1 else "") + str(values[-1])


def _hours(hours: float) -> str:
    if hours < 1:
        return f"{hours * 60:.0f} minutes"
    if hours < 48:
        return f"{hours:.1f} hours"
    return f"{hours / 24:.0f} days"


def decision_records(bundle: ReportBundle, found: list[Caveat] | None = None) -> list[DecisionRecord]:
    """One record per option run, in the bundle's order."""
    found = found if found is not None else report_caveats(bundle)
    rows = decision_rows(bundle)
    records = []
    for option in bundle.options:
        mine = rows[rows["option"] == option.label]
        measured = mine[["concurrency", "speedup", "ci_low", "ci_high", "verdict", "acceptance_rate",
                         "mean_acceptance_length", *(["in_flight"] if "in_flight" in mine else [])]].rename(columns={"acceptance_rate": "measured_acceptance_rate"})
        predicted, note = _predicted_before(bundle, option)
        if not predicted.empty:
            measured = predicted.merge(measured, on="concurrency", how="right")
            order = ["concurrency", "predicted_speedup", "predicted_speedup_low", "predicted_speedup_high",
                     "speedup", "ci_low", "ci_high", "verdict",
                     "predicted_acceptance_rate", "measured_acceptance_rate", "mean_acceptance_length",
                     "predicted_decode_speedup_at_measured_mix", "measured_decode_speedup", "prediction_error_pct",
                     "spec_mode_overhead_ms", "widest_part", "widest_part_break_even_ms", "in_flight"]
            measured = measured[[c for c in order if c in measured]]
        payback = measured_payback(bundle, option)
        mine_or_all = (option.label, bundle.baseline.label)
        applies = caveats.group_caveats([c for c in found if c.subject in mine_or_all
                                        or option.label in c.subject.split(" and ")], with_runs=False)
        records.append(DecisionRecord(
            option=option.label, run=tables.run_id(option.path), baseline_run=tables.run_id(bundle.baseline.path),
            measured=measured.reset_index(drop=True), restart_s=restart_cost(bundle, option)[0],
            restart_source=restart_cost(bundle, option)[1],
            payback_h=payback, traffic=_traffic(bundle.baseline),
            verdict=_verdict_sentence(option.label, mine, payback), caveats=applies, prediction_note=note))
    return records


def render_record(record: DecisionRecord, confidence: float = 0.95) -> str:
    """A decision record as one self-contained HTML block (same in JupyterLab and the HTML)."""
    table = formatting.styled(record.measured, confidence=confidence).to_html()
    day = ", ".join(f"{t['hours_per_day']:g} h at concurrency {t['concurrency']:g}" for t in record.traffic)
    restart = (f"{record.restart_s:.0f} s of downtime per restart ({record.restart_source})" if record.restart_s
               else "unknown (external server: speclab did not restart it; give restart_minutes to 01-baseline)")
    if record.payback_h is None:
        payback = "not computed (no restart cost: give restart_minutes to 01-baseline)"
    elif math.isfinite(record.payback_h):
        payback = f"after {_hours(record.payback_h)} of the expected day ({day})"
    else:
        payback = f"never: the measured speedups save no server time over the expected day ({day})"
    esc = html.escape
    return (
        '<div class="speclab-record" style="border: 1px solid #d0d4da; border-radius: 6px; padding: 0.6em 1em; '
        'margin: 0.8em 0 1.4em 0; max-width: 64em;">'
        f'<h3 style="margin-top: 0.2em;">{esc(record.option)}</h3>'
        f'<p style="font-size: 1.05em;"><b>Verdict.</b> {esc(record.verdict)}</p>'
        f'{table}'
        f'<p style="font-size: 0.9em; color: #444;">{esc(record.prediction_note)}</p>'
        f'<p><b>Restart cost:</b> {esc(restart)}.<br><b>Payback:</b> {esc(payback)}.</p>'
        f'<p style="margin-bottom: 0.2em;"><b>Caveats that apply</b></p>'
        f'{formatting.bullet_list(record.caveats)}'
        f'<p style="font-size: 0.85em; color: #666;">Measured in run {esc(record.run)} '
        f'against baseline {esc(record.baseline_run)}.</p></div>'
    )


def configured(bundle: ReportBundle) -> str | None:
    """The configuration 01 recommended before any restart (its configuration search), in one
    paragraph; None where the baseline ran no search."""
    record = tables.read_recommendation(bundle.baseline)
    return None if record is None else tables.recommendation_sentence(record)


def opening(title: str, sentence: str, before: str | None = None) -> str:
    """The report's head: its title, the configuration recommended before any restart
    (``before``) and the recommendation from what was measured, set apart from everything after."""
    style = ('style="border-left: 5px solid #2e7d32; background: #f1f8e9; padding: 0.7em 1em; '
             'margin: 0.5em 0 1.2em 0; font-size: 1.12em; max-width: 60em;"')
    head = f"<h2>{html.escape(title)}</h2>"
    if before:
        head += (f'<div class="speclab-configuration" {style}><b>Before any restart, the baseline\'s search '
                 f"recommended:</b> {html.escape(before)}</div>")
    return head + f'<div class="speclab-recommendation" {style}><b>Recommendation.</b> {html.escape(sentence)}</div>'



def recommendation(bundle: ReportBundle, records: list[DecisionRecord] | None = None,
                   found: list[Caveat] | None = None) -> str:
    """The report's first sentence: what to do, and the measured evidence for it.

    It recommends nothing over a CONTAMINATED comparison, an option whose outputs fail the
    losslessness check, or intervals that all include 1 ("unclear"): it says why instead.
    """
    rows = decision_rows(bundle)
    if rows.empty:
        return "No paired measurements: run 01-baseline and an option (02-ngram) on the same plan first."
    found = found if found is not None else report_caveats(bundle)
    contaminated = next((c for c in found if c.kind is Kind.CONTAMINATED), None)
    if contaminated:
        return ("No recommendation: " + contaminated.detail
                + ", so the measured speed differences may come from the load, not the options; "
                "rerun the arms on a quiet machine.")
    broken = {c.subject for c in found if c.kind is Kind.NOT_LOSSLESS}
    records = records if records is not None else decision_records(bundle, found)
    paybacks = {r.option: r.payback_h for r in records}
    levels = _levels(sorted(int(c) for c in rows["concurrency"].unique()))
    scored = []
    for option, cells in rows.groupby("option", sort=False):
        faster = cells[cells["verdict"] == compare.FASTER]
        slower = cells[cells["verdict"] == compare.SLOWER]
        scored.append((len(faster) - len(slower), float(cells["speedup"].mean()), option, cells, faster, slower))
    scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
    if scored[0][2] in broken:
        return (f"Do not restart into {scored[0][2]} yet: its greedy outputs differ from the baseline's beyond "
                "the baseline's own noise (losslessness check), so its speed may come from wrong tokens; "
                "recheck both arms in float32 first.")
    _, _, option, cells, faster, slower = scored[0]
    if faster.empty:
        best = rows.loc[rows["speedup"].idxmax()]
        closest = (f"{best['option']} at concurrency {int(best['concurrency'])} with "
                   f"{formatting.interval_text(best['speedup'], best['ci_low'], best['ci_high'])}")
        if (rows["verdict"] == compare.SLOWER).any():
            where = _levels(sorted(int(c) for c in rows.loc[rows["verdict"] == compare.SLOWER, "concurrency"].unique()))
            return (f"Keep the baseline: no option was measurably faster at any concurrency tested ({levels}), "
                    f"and options were slower at concurrency {where}; the closest was {closest}.")
        return (f"No recommendation yet: no option was measurably faster or slower at any concurrency tested "
                f"({levels}); every interval includes 1 (the closest: {closest}). A restart buys nothing "
                "measurable here; more prompts (per_category, rounds) would narrow the intervals.")
    top = faster.loc[faster["speedup"].idxmax()]
    best = formatting.interval_text(top["speedup"], top["ci_low"], top["ci_high"])
    where = faster["concurrency"].astype(int).tolist()
    text = (f"Restart into {option}: it was faster at concurrency {_levels(where)} "
            + (f"({best})" if len(where) == 1 else f"(up to {best} at concurrency {int(top['concurrency'])})"))
    payback = paybacks.get(option)
    if payback is not None and math.isfinite(payback):
        text += f" and pays its restart back in {_hours(payback)} of the expected traffic"
    elif payback is not None:
        text += ", but over the expected traffic its restart never pays back"
    if not slower.empty:
        text += (f", but it was slower at concurrency {_levels(slower['concurrency'].astype(int).tolist())}, "
                 "so keep the baseline if your traffic runs there")
    return text + "."


# --------------------------------------------------------------------------- tables and figures


def heatmaps(bundle: ReportBundle) -> dict[str, Figure]:
    """Per option: the category x concurrency speedup grid."""
    level = int(round(bundle.confidence * 100))
    return {label: plots.speedup_heatmap(table, title=f"{label}: speedup over baseline ({level} % CI decides)")
            for label, table in bundle.comparisons.items()}


def all_category_comparisons(bundle: ReportBundle) -> pd.DataFrame:
    """Every option's per-category comparison in one table (category prefixed by option)."""
    frames = []
    for label, table in bundle.comparisons.items():
        part = table.copy()
        if len(bundle.comparisons) > 1:
            part["category"] = label + ": " + part["category"]
        frames.append(part)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def speedup_cells(bundle: ReportBundle) -> pd.DataFrame:
    """Per option x category x concurrency: speedup, CI, verdict (the long table behind the heatmaps)."""
    frames = [t[t["category"] != "all"].assign(option=label) for label, t in bundle.comparisons.items()]
    if not frames:
        return pd.DataFrame()
    frame = pd.concat(frames, ignore_index=True)
    cols = ["option", "category", "concurrency", "pairs", "speedup", "ci_low", "ci_high", "verdict",
            "base_tpot_s_median", "treat_tpot_s_median"]
    return tables.mark_load(frame[cols], bundle.runs)


def collapsed(content: Any, summary: str) -> str:
    """HTML (or a Styler) folded behind a one-line summary the reader can open."""
    body = content.to_html() if hasattr(content, "to_html") and not isinstance(content, str) else str(content)
    return (f'<details style="margin: 0.4em 0 1em 0;"><summary style="cursor: pointer;">{html.escape(summary)}'
            f"</summary>{body}</details>")


def identities(bundle: ReportBundle) -> pd.DataFrame:
    """The servers side by side, one column per run, without local paths (launch commands
    are in :func:`launch_commands`: too wide for this table)."""
    columns = {}
    for run in bundle.runs:
        table = tables.identity_table(run.server or None)
        values = table.set_index("field")["value"] if not table.empty else pd.Series(dtype=str)
        columns[f"{run.label} ({run.path.name})"] = values.drop("launch", errors="ignore")
    frame = pd.DataFrame(columns)
    frame.index.name = "field"
    return frame


def launch_commands(bundle: ReportBundle) -> pd.DataFrame:
    """Each server's launch command (local paths cut), one row per run."""
    rows = [{"run": tables.run_id(run.path), "option": run.label,
             "launch": tables.scrub_paths(run.server.get("launch_command") or "-")} for run in bundle.runs]
    return pd.DataFrame(rows)


def predictions(bundle: ReportBundle) -> pd.DataFrame:
    """Predicted (from the baseline alone) vs measured decode speedup per option and concurrency."""
    # The baseline predicts the model-free proposers only; a drafter's prediction (03) is made
    # offline from its own head and shown in its section.
    frames = [tables.predicted_vs_measured(bundle.baseline, option).assign(option=option.label)
              for option in bundle.options if option.arm in REPLAYABLE_METHODS]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    cols = ["option", "category", "concurrency", "predicted_acceptance_rate", "measured_acceptance_rate",
            "predicted_speedup", "measured_speedup", "error_pct", "cost_model_fit"]
    rows = table[table["category"] == "all"][[c for c in cols if c in table]].reset_index(drop=True)
    return tables.mark_load(rows, bundle.runs)


def report_caveats(bundle: ReportBundle) -> list[Caveat]:
    """Everything detected that should temper the verdicts (per run, and per option pair)."""
    return caveats.caveats(bundle.runs, baseline=bundle.baseline, comparisons=bundle.comparisons)


def predicted_losers(bundle: ReportBundle) -> pd.DataFrame:
    """The baseline's own predictions (01-baseline), with the options predicted to lose first."""
    saved = tables.read_predictions(bundle.baseline)
    if saved is None:
        return pd.DataFrame({"note": ["the baseline run made no predictions (predict_methods was empty)"]})
    predicted = tables.prediction_summary(saved)
    return predicted.sort_values(["loses", "option", "concurrency"], ascending=[False, True, True]).reset_index(drop=True)


# --------------------------------------------------------------------------- other notebooks' sections


def _section_rank(kind: str) -> tuple[int, str]:
    for i, prefix in enumerate(SECTION_ORDER):
        if kind.startswith(prefix) or prefix in kind:
            return i, kind
    return len(SECTION_ORDER), kind


def latest_sections(outputs_root: str | Path | None = None) -> list[Section]:
    """The newest section of each kind among finished runs, in reading order."""
    latest: dict[str, Section] = {}
    for path in list_runs(outputs_root):
        if read_json(path / MANIFEST).get("status") != "ok":
            continue
        section = read_section(path)
        if section is not None:
            section.run_id = tables.run_id(path)
            latest[section.kind] = section  # oldest first, so the newest wins
    return sorted(latest.values(), key=lambda s: _section_rank(s.kind))


def render_section(section: Section) -> list[Any]:
    """A section as displayable parts: heading, summary, figures, styled tables, notes; local
    paths in its text are cut to their last part (the report is sent to other people)."""
    from IPython.display import HTML, Image, Markdown

    summary = "\n".join(f"- {tables.scrub_paths(s)}" for s in section.summary)
    parts: list[Any] = [Markdown(f"### {tables.scrub_paths(section.title)}\n\n" + summary)]
    for name, figure in section.figures.items():
        parts.append(Image(filename=str(figure)))
        parts.append(HTML(f'<p style="font-size: 0.85em; color: #666;">Figure: {html.escape(formatting.header(name))}</p>'))
    for name, table in section.tables.items():
        caption = formatting.header(name)
        text_columns = [c for c in table.columns if table[c].map(lambda v: isinstance(v, str)).any()]
        table = table.assign(**{c: table[c].map(lambda v: tables.scrub_paths(v) if isinstance(v, str) else v)
                                for c in text_columns})
        styler = formatting.styled(table, caption=caption, max_rows=25)
        parts.append(HTML(styler.to_html() if len(table) <= 12 else collapsed(styler, f"{caption} ({len(table)} rows)")))
    if section.notes:
        parts.append(HTML(formatting.bullet_list([tables.scrub_paths(n) for n in section.notes])))
    parts.append(HTML(f'<p style="font-size: 0.85em; color: #666;">From run {html.escape(section.run_id)}.</p>'))
    return parts
