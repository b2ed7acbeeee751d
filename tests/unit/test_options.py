"""Engines, methods and speculative options (speclab.options): a bad option is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from speclab.options import SpecOption


@pytest.mark.parametrize("bad", [
    {"method": "baseline", "num_speculative_tokens": 3},
    {"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2},
    {"method": "medusa2"},
])
def test_bad_options_are_rejected(bad: dict) -> None:
    with pytest.raises(ValidationError):
        SpecOption(**bad)
