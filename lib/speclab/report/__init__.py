"""What a reader sees: tables, figures, findings, caveats and 05-report's decision (``docs/report.md``).

It reads run folders only: no module here imports measurement or a server. Modules by layer:
``findings`` (plain-sentence findings of an analysis) is analysis; ``tables`` (tables read from
run folders), ``caveats`` (what the data says against a number, each with a kind a decision
reads), ``formatting`` (every table's look), ``plots`` (static seaborn figures), ``explore``
(ipywidgets explorers, interactive sessions only) and ``decision`` (05-report: recommendation,
decision records, heatmaps, other notebooks' sections) are workbook layer.
"""

__all__ = ["caveats", "decision", "explore", "findings", "formatting", "plots", "tables"]
