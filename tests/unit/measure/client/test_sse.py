"""The I/O-free parsing core (speclab.measure.client.sse): SSE bytes to payloads, payloads to one
record."""

from __future__ import annotations

import pytest

from speclab.measure.client import SSEDecoder, StreamAccumulator
from tests.unit.measure.client.helpers import chat_spec, chunk, final_usage, payload


def test_sse_decoder_is_indifferent_to_read_boundaries() -> None:
    stream = (
        b': ping\n\nevent: x\ndata: {"a": 1}\r\n\r\ndata: line1\ndata: line2\n\ndata:[DONE]\n\n'
    )
    expected = [b'{"a": 1}', b"line1\nline2", b"[DONE]"]
    for step in (1, 3, 7, len(stream)):
        got: list[bytes] = []
        dec = SSEDecoder(lambda t, d, got=got: got.append(d))
        for i in range(0, len(stream), step):
            dec.feed(stream[i : i + step], 0.0)
        dec.close(0.0)
        assert got == expected, step
    got = []
    dec = SSEDecoder(lambda t, d: got.append(d))
    dec.feed(b'data: {"last": true}', 0.0)  # no closing blank line before EOF
    dec.close(0.0)
    assert got == [b'{"last": true}']


def test_accumulator_usage_details_and_token_id_counts() -> None:
    acc = StreamAccumulator(chat_spec(), send_perf=10.0, t0=9.0)
    acc.http_status = 200
    acc.feed(10.5, payload(chunk(reasoning="r", ids=[1, 2])))
    acc.feed(10.7, payload(chunk("x", ids=[3])))
    acc.feed(10.8, payload(final_usage(3, reasoning=2)))
    rec = acc.finish()
    assert rec.send_time_s == 1.0 and rec.ttft_s == pytest.approx(0.5)
    assert rec.ttfa_s == pytest.approx(0.7) and rec.e2e_s == pytest.approx(0.7)
    assert rec.reasoning_tokens == 2 and rec.answer_tokens == 1 and rec.output_tokens == 3

    acc = StreamAccumulator(chat_spec(), send_perf=0.0, t0=0.0)
    acc.http_status = 200
    acc.feed(0.1, payload(chunk("x", ids=[3, 4])).decode())  # str works too
    acc.feed(0.2, b"[DONE]")
    rec = acc.finish()
    assert rec.output_tokens == 2 and rec.output_tokens_source == "token_ids" and acc.done


def test_accumulator_flags_garbage_and_empty_streams() -> None:
    acc = StreamAccumulator(chat_spec(), 0.0, 0.0)
    acc.http_status = 200
    acc.feed(0.1, b"<html>oops</html>")
    assert "not JSON" in (acc.finish().error or "")
    acc = StreamAccumulator(chat_spec(), 0.0, 0.0)
    acc.http_status = 200
    acc.feed(0.1, b"[DONE]")
    rec = acc.finish()
    assert not rec.ok and "without carrying any token" in (rec.error or "")
