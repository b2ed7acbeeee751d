"""Table formatting: units from column names, intervals, verdict colours, no index."""

from __future__ import annotations

import math

import pandas as pd

from speclab.predict import compare
from speclab.report import formatting


def test_headers_read_as_words_with_units() -> None:
    assert formatting.header("tpot_ms_median") == "TPOT median (ms)"
    assert formatting.header("output_tok_s") == "output (tok/s)"
    assert formatting.header("error_pct") == "error (%)"
    assert formatting.header("concurrency") == "concurrency"
    assert formatting.header("restart_downtime_h") == "restart downtime (h)"


def test_seconds_become_milliseconds_and_token_rates_do_not() -> None:
    frame = pd.DataFrame({"tpot_s_median": [0.0123], "e2e_s": [1.5], "output_tok_s": [41.0],
                          "tok_s_per_request": [40.0]})
    shown = formatting.to_display_units(frame)
    assert list(shown.columns) == ["tpot_ms_median", "e2e_ms", "output_tok_s", "tok_s_per_request"]
    assert shown["tpot_ms_median"].iloc[0] == 12.3
    assert shown["output_tok_s"].iloc[0] == 41.0


def test_interval_text() -> None:
    assert formatting.interval_text(1.3612, 1.2149, 1.5288) == "1.36x [1.21, 1.53]"
    assert formatting.interval_text(0.9, None, None) == "0.90x"
    assert formatting.interval_text(float("nan"), 1, 2) == formatting.MISSING


def test_styled_table_formats_every_kind_of_column() -> None:
    frame = pd.DataFrame({
        "option": ["ngram k=4", "ngram k=4"],
        "concurrency": [1, 8],
        "speedup": [1.3612, 0.81],
        "ci_low": [1.2149, 0.74],
        "ci_high": [1.5288, 0.88],
        "acceptance_rate": [0.4567, None],
        "tpot_s_median": [0.0123, 0.0301],
        "payback_hours": [2.5, math.inf],
        "verdict": [compare.FASTER, compare.SLOWER],
    })
    html = formatting.styled(frame, caption="Decision", table_id="decision-table").to_html()
    for text in ("1.36x [1.21, 1.53]", "0.81x [0.74, 0.88]", "45.7%", "12.3", "30.1", "2.5 h", "never",
                 "speedup (95 % CI)", "TPOT median (ms)", 'id="T_decision-table"', "Decision"):
        assert text in html, text
    assert formatting.MISSING in html  # the missing acceptance
    assert formatting.VERDICT_COLOURS[compare.FASTER] in html and formatting.VERDICT_COLOURS[compare.SLOWER] in html
    assert "0.0123" not in html and "<th class=\"blank" not in html  # no raw floats, no index column
    assert 'class="row_heading' not in html


def test_verdict_colours_cover_every_verdict_compare_gives() -> None:
    assert set(formatting.VERDICT_COLOURS) == {compare.FASTER, compare.SLOWER, compare.UNCLEAR, compare.TOO_FEW}


def test_a_named_index_becomes_a_column() -> None:
    frame = pd.DataFrame({"share": [0.5, 0.25]}, index=pd.Index(["dense_gemm", "attention"], name="bucket"))
    html = formatting.styled(frame).to_html()
    assert "dense_gemm" in html and "50.0%" in html and ">bucket<" in html


def test_bullet_list_escapes_and_says_when_empty() -> None:
    html = formatting.bullet_list(["ngram k=<4> & co"])
    assert "&lt;4&gt; &amp; co" in html and html.count("<li>") == 1
    assert "None detected." in formatting.bullet_list([])


def test_numbers_stored_beside_none_are_still_formatted() -> None:
    # payback tables mix None (the total row) with floats: pandas keeps them as objects
    frame = pd.DataFrame({"concurrency": pd.Series([1.0, 4.0, None], dtype=object),
                          "speedup": pd.Series([0.892515, 0.678157, None], dtype=object),
                          "restart_downtime_h": [0.0181, 0.0181, 0.0181], "payback_hours": [None, None, math.inf]})
    assert frame["speedup"].dtype == object
    html = formatting.styled(frame).to_html()
    for text in (">1<", ">4<", "0.89x", "0.68x", "0.018 h", "never"):
        assert text in html, text
    assert "0.892515" not in html and "1.000000" not in html


def test_any_point_with_low_and_high_reads_as_one_interval() -> None:
    frame = pd.DataFrame({"concurrency": [1], "predicted_speedup": [0.89], "predicted_speedup_low": [0.8],
                          "predicted_speedup_high": [0.97], "speedup": [1.41], "ci_low": [1.16], "ci_high": [1.73]})
    shown = formatting.with_intervals(frame)
    assert list(shown.columns) == ["concurrency", "predicted_speedup (interval)", "speedup (95 % CI)"]
    assert shown.iloc[0].tolist()[1:] == ["0.89x [0.80, 0.97]", "1.41x [1.16, 1.73]"]
    assert formatting.header("predicted_speedup (interval)") == "predicted speedup (interval)"
