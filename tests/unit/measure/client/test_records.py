"""What is asked (speclab.measure.client.records)."""

from __future__ import annotations

import pytest

from speclab.errors import SpeclabError
from speclab.measure.client import RequestSpec


def test_request_spec_needs_messages_or_prompt() -> None:
    with pytest.raises(SpeclabError):
        RequestSpec("r", "p", "c")
    with pytest.raises(SpeclabError):
        RequestSpec("r", "p", "c", messages=[], prompt="x")
