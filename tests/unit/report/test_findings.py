"""Plain-sentence findings and the 00-profile report section (speclab.report.findings), on the
recorded H200 MoE trace (tests/unit/conftest.py's gpu_report)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.report import findings
from speclab.sections import read_section


def test_decode_time_by_bucket_is_the_decode_summary_largest_first(gpu_report) -> None:
    table = findings.decode_time_by_bucket(gpu_report)
    decode = gpu_report.summary.query("step_kind == 'decode' and rank == 0 and time_us > 0")
    assert len(table) == len(decode)
    assert table["share"].is_monotonic_decreasing
    assert table["share"].sum() == pytest.approx(1.0)
    assert table["time_per_step_ms"].iloc[0] == pytest.approx(
        decode.sort_values("share").iloc[-1]["time_per_step_us"] / 1e3)


def test_findings_name_the_buckets_that_grow_and_those_that_do_not(gpu_report) -> None:
    sentences = findings.profile_findings(gpu_report)
    text = " ".join(sentences)
    scaling = findings.token_scaling(gpu_report)
    growing = scaling[scaling["scales_with_tokens"]]["bucket"].tolist()
    flat = scaling[~scaling["scales_with_tokens"] & scaling["slope_us_per_token"].notna()]["bucket"].tolist()
    assert growing and flat
    grows_sentence = next(s for s in sentences if s.startswith("Grows with tokens per step"))
    assert all(b in grows_sentence for b in growing[:4])
    flat_sentence = next(s for s in sentences if s.startswith("Flat in tokens per step"))
    assert all(b in flat_sentence for b in flat[:5])
    top = findings.decode_time_by_bucket(gpu_report).iloc[0]
    assert f"{top['bucket']} {top['share'] * 100:.0f} %" in text
    assert sentences[0].startswith("Rank 0 ran ") and "decode steps" in sentences[0]


def test_equal_tokens_per_step_says_scaling_cannot_be_read(gpu_report) -> None:
    flat = gpu_report.scaling.assign(slope_us_per_token=float("nan"), scales_with_tokens=False)
    report = type(gpu_report)(**{**gpu_report.__dict__, "scaling": flat})
    assert any("cannot be read from this trace" in s for s in findings.profile_findings(report))


def test_the_profile_section_round_trips(gpu_report, tmp_path: Path) -> None:
    findings.write_profile_section(tmp_path, gpu_report)
    section = read_section(tmp_path)
    assert section is not None and section.kind == "profile"
    assert section.summary == findings.profile_findings(gpu_report)
    assert set(section.tables) == {"decode_time_by_bucket", "token_scaling"}
    assert "growth_over_range_fraction" in section.tables["token_scaling"]
    assert set(section.figures) == {"time_per_step_by_bucket", "bucket_time_vs_tokens"}
    assert all(p.stat().st_size > 5_000 for p in section.figures.values())
