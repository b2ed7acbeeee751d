"""What a reader sees: tables, figures, findings and 05-report's decision (``docs/report.md``).

Modules by layer: ``findings`` (plain-sentence findings of an analysis) is analysis;
``tables`` (tables and caveats read from run folders), ``formatting`` (every table's look),
``plots`` (static seaborn figures), ``explore`` (ipywidgets explorers, interactive sessions
only) and ``decision`` (05-report: recommendation, decision records, heatmaps, other
notebooks' sections) are workbook layer.
"""

__all__ = ["decision", "explore", "findings", "formatting", "plots", "tables"]
