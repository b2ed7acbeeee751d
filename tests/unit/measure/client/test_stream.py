"""StreamClient (speclab.measure.client.stream): one request in, one record out, through both
transports (the fast one against a real asyncio server on 127.0.0.1, httpx on a MockTransport),
fed the stream shapes vLLM and SGLang send (tests/unit/measure/client/helpers.py).
"""

from __future__ import annotations

import asyncio
import json
import time

import orjson
import pytest

from speclab.errors import SpeclabError
from speclab.measure.client import RequestSpec, Sampling, StreamClient
from tests.unit.measure.client.helpers import (
    DONE,
    KINDS,
    Reply,
    Seen,
    chat_spec,
    chunk,
    ev,
    final_usage,
    make_client,
    send_one,
    stream_route,
)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])
def test_reasoning_only_stream_counts_its_tokens(kind: str, key: str) -> None:
    parts = [
        chunk("", role=True),
        chunk(reasoning="Let", reasoning_key=key),
        chunk(reasoning=" me", reasoning_key=key),
        chunk(reasoning=" think", reasoning_key=key, finish="length"),
        final_usage(3),
        DONE,
    ]
    rec, _, _ = send_one(kind, stream_route(parts))
    assert rec.ok, rec.error
    assert rec.output_tokens == 3 and rec.output_tokens_source == "usage"
    assert rec.reasoning_text == "Let me think" and rec.text == ""
    assert rec.chunks == 3 and rec.ttft_s is not None and rec.ttfa_s is None
    assert rec.finish_reason == "length"


@pytest.mark.parametrize("kind", KINDS)
def test_reasoning_then_content_has_ttfa_after_ttft(kind: str) -> None:
    parts = [
        chunk("", role=True, ct=0),
        chunk(reasoning="Hmm", ct=1),
        chunk(reasoning=" ok", ct=2),
        chunk(ct=3, ids=[99]),  # the think-end token: no text
        chunk("Yes", ct=4),
        chunk(".", ct=5, finish="stop"),
        final_usage(5),
        DONE,
    ]
    rec, _, _ = send_one(kind, stream_route(parts, delay_s=0.02))
    assert rec.ok, rec.error
    assert rec.ttft_s is not None and rec.ttfa_s is not None
    assert rec.ttfa_s > rec.ttft_s + 0.03
    assert rec.text == "Yes." and rec.reasoning_text == "Hmm ok"
    assert rec.reasoning_tokens == 2 and rec.answer_tokens == 3
    assert rec.chunk_tokens == [1, 1, 1, 1, 1]


@pytest.mark.parametrize("kind", KINDS)
def test_multi_token_chunks_with_continuous_usage(kind: str) -> None:
    parts = [
        chunk("", role=True, ct=0),
        chunk("a b c", ct=3, ids=[1, 2, 3]),
        chunk(" d e f g", ct=7, ids=[4, 5, 6, 7]),
        chunk(" h i", ct=9, ids=[8, 9], finish="stop"),
        final_usage(9),
        DONE,
    ]
    rec, _, _ = send_one(kind, stream_route(parts, delay_s=0.01))
    assert rec.ok, rec.error
    assert rec.chunks == 3 and rec.chunk_tokens == [3, 4, 2]
    assert rec.output_tokens == 9 and rec.tokens_per_chunk_mean == 3.0
    assert rec.token_ids == list(range(1, 10))
    assert rec.prompt_tokens == 5
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 8)
    assert len(rec.chunk_offsets_s) == 3 and rec.chunk_offsets_s == sorted(rec.chunk_offsets_s)
    assert rec.e2e_s == rec.chunk_offsets_s[-1]


@pytest.mark.parametrize("kind", KINDS)
def test_missing_usage_falls_back_to_server_tokenize(kind: str) -> None:
    parts = [chunk("Hello"), chunk(" world", finish="stop"), DONE]
    rec, seen, _ = send_one(kind, stream_route(parts))
    assert rec.ok, rec.error
    assert rec.output_tokens == 7 and rec.output_tokens_source == "tokenize"
    tok = [s for s in seen if s.path == "/tokenize"]
    assert len(tok) == 1
    assert tok[0].body == {"model": "m", "prompt": "Hello world", "add_special_tokens": False}
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 6)


@pytest.mark.parametrize("kind", KINDS)
def test_sse_comments_pings_event_lines_and_done(kind: str) -> None:
    split = chunk(" there", ct=2)
    parts = [
        b": ping\n\n",
        b"event: message\r\n" + chunk("Hi", ct=1).replace(b"\n", b"\r\n"),
        b"\n",  # blank keep-alive
        b": ping - 2026-11-29 12:00:00\n\n" + split[:17],
        split[17:],
        b"id: 4\nretry: 100\n\n",
        final_usage(2),
        DONE,
    ]
    rec, _, _ = send_one(kind, stream_route(parts))
    assert rec.ok, rec.error
    assert rec.text == "Hi there" and rec.chunks == 2 and rec.output_tokens == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "error_event",
    [
        {"error": {"message": "boom: engine died", "type": "InternalServerError", "code": 500}},
        {"object": "error", "message": "boom: engine died", "type": "BadRequestError", "code": 400},
    ],
)
def test_error_mid_stream_becomes_record_error(kind: str, error_event: dict) -> None:
    parts = [chunk("Partial", ct=1), ev(error_event), DONE]
    rec, _, _ = send_one(kind, stream_route(parts))
    assert not rec.ok and rec.http_status == 200
    assert "boom: engine died" in (rec.error or "")
    assert rec.text == "Partial" and rec.chunks == 1


@pytest.mark.parametrize("kind", KINDS)
def test_http_404_keeps_status_and_server_text(kind: str) -> None:
    body = orjson.dumps({"error": {"message": "The model `m` does not exist.", "code": 404}})
    route = lambda req: Reply([body], status=404, content_type="application/json", framing="length")
    rec, _, _ = send_one(kind, route)
    assert not rec.ok and rec.http_status == 404
    assert rec.error == "HTTP 404: The model `m` does not exist."
    assert rec.chunks == 0 and rec.output_tokens is None


@pytest.mark.parametrize("kind", KINDS)
def test_base_url_ending_in_v1_hits_the_path_exactly_once(kind: str) -> None:
    parts = [chunk("ok", ct=1), final_usage(1), DONE]
    rec, seen, _ = send_one(kind, stream_route(parts), suffix="/v1/")
    assert rec.ok, rec.error
    assert [s.path for s in seen] == ["/v1/chat/completions"]


@pytest.mark.parametrize("kind", KINDS)
def test_completions_prompt_goes_to_v1_completions(kind: str) -> None:
    text = lambda t, ct: ev(
        {
            "choices": [{"index": 0, "text": t, "finish_reason": None}],
            "usage": {"prompt_tokens": 2, "completion_tokens": ct},
        }
    )
    parts = [text("one", 1), text(" two", 2), final_usage(2), DONE]
    spec = RequestSpec("r1", "p1", "test", prompt="count:", max_tokens=2)
    rec, seen, _ = send_one(kind, stream_route(parts), spec=spec)
    assert rec.ok, rec.error
    assert seen[0].path == "/v1/completions"
    assert seen[0].body["prompt"] == "count:" and "messages" not in seen[0].body
    assert "chat_template_kwargs" not in seen[0].body and seen[0].body["max_tokens"] == 2
    assert rec.text == "one two" and rec.output_tokens == 2


@pytest.mark.parametrize("kind", KINDS)
def test_request_body_is_explicit(kind: str) -> None:
    sampling = Sampling(
        max_tokens=64, chat_template_kwargs={"enable_thinking": True}, extra_body={"top_k": 5}
    )
    parts = [chunk("ok", ct=1), final_usage(1), DONE]
    _, seen, _ = send_one(
        kind, stream_route(parts), spec=chat_spec(max_tokens=32), sampling=sampling
    )
    body = seen[0].body
    assert body["model"] == "m" and body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == 32 and body["temperature"] == 0.0
    assert "seed" in body and body["seed"] is None and body["ignore_eos"] is False
    assert body["chat_template_kwargs"] == {"enable_thinking": True} and body["top_k"] == 5
    assert body["stream"] is True and body["return_token_ids"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert seen[0].headers["accept-encoding"] == "identity"


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_field_400_retries_once_without_extras(kind: str) -> None:
    good = [chunk("ok"), final_usage(1), DONE]
    reject = orjson.dumps(
        {"error": {"message": "Unrecognized request argument supplied: return_token_ids"}}
    )

    def route(req: Seen) -> Reply:
        if "return_token_ids" in req.body:
            return Reply([reject], status=400, content_type="application/json", framing="length")
        return Reply(list(good))

    async def main():
        async with make_client(kind, route) as (client, seen, _):
            t0 = time.perf_counter()
            first = await asyncio.gather(
                client.send(chat_spec("a"), t0), client.send(chat_spec("b"), t0)
            )
            third = await client.send(chat_spec("c"), t0)
            return [*first, third], seen, client.capabilities

    recs, seen, caps = asyncio.run(main())
    assert all(r.ok for r in recs), [r.error for r in recs]
    assert caps["return_token_ids"] is False and caps["continuous_usage_stats"] is False
    assert "return_token_ids" in caps["downgraded_because"]
    # Each send that was rejected retried once, lean; later sends went lean at once.
    rejected = [s for s in seen if "return_token_ids" in s.body]
    lean = [s for s in seen if "return_token_ids" not in s.body]
    assert 1 <= len(rejected) <= 2 and len(lean) == 3
    assert seen[-1] in lean and seen[0] in rejected
    assert all(s.body["stream_options"] == {"include_usage": True} for s in lean)


@pytest.mark.parametrize("kind", KINDS)
def test_api_key_is_sent_but_never_recorded(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-secret-4242"
    monkeypatch.setenv("SPECLAB_TEST_KEY", secret)
    parts = [chunk("ok", ct=1), final_usage(1), DONE]
    rec, seen, client = send_one(kind, stream_route(parts), api_key_env="SPECLAB_TEST_KEY")
    assert seen[0].headers["authorization"] == f"Bearer {secret}"
    assert secret not in json.dumps(rec.to_row())
    assert secret not in repr(rec) and secret not in repr(client)
    assert "SPECLAB_TEST_KEY" not in json.dumps(rec.to_row())


def test_missing_api_key_env_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECLAB_NO_SUCH_KEY", raising=False)
    with pytest.raises(SpeclabError, match="SPECLAB_NO_SUCH_KEY"):
        StreamClient("http://127.0.0.1:1", "m", api_key_env="SPECLAB_NO_SUCH_KEY")


@pytest.mark.parametrize("kind", KINDS)
def test_non_streamed_json_answer_is_still_counted(kind: str) -> None:
    body = orjson.dumps(
        {
            "choices": [{"index": 0, "message": {"content": "whole"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    )
    route = lambda req: Reply([body], content_type="application/json", framing="length")
    rec, _, _ = send_one(kind, route)
    assert rec.ok, rec.error
    assert rec.text == "whole" and rec.output_tokens == 1
