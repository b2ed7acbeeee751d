"""Report sections round-trip through the run folder."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.sections import read_section, write_section


def test_a_section_round_trips_tables_figures_and_sentences(tmp_path: Path) -> None:
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    table = pd.DataFrame({"tokens": [1, 2, 4], "step_ms": [1.0, 1.9, 3.6]})
    write_section(tmp_path, kind="04-moespec", title="MoE", summary=["Verify costs 3.6x at n=4."],
                  tables={"verify-cost": table}, figures={"curve": fig}, notes=["borrowed figures"])
    section = read_section(tmp_path)
    assert section is not None
    assert section.kind == "04-moespec" and section.summary == ["Verify costs 3.6x at n=4."]
    assert section.tables["verify-cost"]["step_ms"].tolist() == [1.0, 1.9, 3.6]
    assert section.figures["curve"].read_bytes()[:4] == b"\x89PNG"
    assert section.notes == ["borrowed figures"] and section.run_id == tmp_path.name


def test_no_section_is_none_and_bad_names_are_one_sentence(tmp_path: Path) -> None:
    assert read_section(tmp_path) is None
    with pytest.raises(SpeclabError, match="lower-case"):
        write_section(tmp_path, kind="x", title="x", summary=[], tables={"Bad Name": pd.DataFrame()})
