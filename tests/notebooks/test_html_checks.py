"""The report checks themselves catch what they are for (no server needed)."""

from __future__ import annotations

from tests.notebooks.html_checks import long_floats_in


def test_a_raw_float_in_the_report_is_caught_and_humane_numbers_pass() -> None:
    raw = "<p>training step 0.00272 s per 2,048 tokens</p>"
    assert long_floats_in(raw) and "0.00272" in long_floats_in(raw)[0]
    humane = ("<style>.x{width:0.123456px}</style><p>2.72 ms per 2,048 tokens; 1.0434 x; run 2026-12-04/030512</p>"
              '<img src="data:image/png;base64,AAAA1.123456">')
    assert long_floats_in(humane) == []
