"""Prompt sets: built-in data, user JSONL, ShareGPT, selection, batching and error sentences."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from speclab.errors import SpeclabError
from speclab.prompts import (
    BUILTIN_CATEGORIES,
    Prompt,
    PromptReuseWarning,
    distinct_batches,
    load_builtin,
    load_jsonl,
    load_prompts,
    load_sharegpt,
    select_prompts,
)


def write_jsonl(path: Path, lines: list[object | str]) -> Path:
    """Write each item as a line: dicts as JSON, strings verbatim (for broken lines)."""
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# ------------------------------------------------------------------------------ built-in


def test_builtin_has_every_category_with_enough_prompts() -> None:
    prompts = load_builtin()
    counts = Counter(p.category for p in prompts)
    assert len(BUILTIN_CATEGORIES) >= 7
    assert tuple(counts) == BUILTIN_CATEGORIES  # categories come back in declared order
    assert all(counts[c] >= 12 for c in BUILTIN_CATEGORIES), counts


def test_builtin_ids_are_unique_and_stable() -> None:
    prompts = load_builtin()
    ids = [p.id for p in prompts]
    assert len(ids) == len(set(ids))
    for p in prompts:
        assert re.fullmatch(rf"{p.category}-\d\d", p.id), p.id


def test_builtin_prompts_are_well_formed() -> None:
    for p in load_builtin():
        assert p.messages is not None and p.prompt is None
        assert p.messages[-1]["role"] == "user"
        assert p.max_tokens is not None and 32 <= p.max_tokens <= 1024
        # Roughly 4 characters a token: inputs stay under about 600 tokens.
        assert sum(len(m["content"]) for m in p.messages) < 600 * 4, p.id


def test_builtin_multi_turn_has_prior_turns() -> None:
    for p in load_builtin(["multi_turn"]):
        assert p.messages is not None
        roles = [m["role"] for m in p.messages if m["role"] != "system"]
        assert roles.count("assistant") >= 2, p.id


def test_every_code_editing_prompt_contains_a_code_block() -> None:
    prompts = load_builtin(["code_editing"])
    assert prompts
    for p in prompts:
        assert p.messages is not None
        user = [m["content"] for m in p.messages if m["role"] == "user"][-1]
        block = re.search(r"```\w*\n(.*?)```", user, re.DOTALL)
        assert block, p.id
        assert 15 <= block.group(1).count("\n") <= 60, p.id


def test_builtin_category_subset_keeps_the_order_asked() -> None:
    prompts = load_builtin(["translation", "math_reasoning"])
    assert list(dict.fromkeys(p.category for p in prompts)) == ["translation", "math_reasoning"]


def test_builtin_unknown_category_lists_the_known_ones() -> None:
    with pytest.raises(SpeclabError) as err:
        load_builtin(["poetry"])
    assert "'poetry'" in str(err.value)
    assert "code_editing" in str(err.value)


# ---------------------------------------------------------------------------- user JSONL


def test_load_jsonl_fills_missing_ids_and_skips_blank_lines(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {"id": "a", "category": "chat", "messages": chat("hi"), "max_tokens": 32},
            "",
            {"category": "chat", "prompt": "Once upon a time"},
            "   ",
            {"category": "code", "messages": chat("write x")},
        ],
    )
    prompts = load_jsonl(path)
    assert [p.id for p in prompts] == ["a", "mine-3", "mine-5"]
    assert prompts[0].messages == ({"role": "user", "content": "hi"},)
    assert prompts[0].max_tokens == 32
    assert prompts[1].prompt == "Once upon a time" and prompts[1].messages is None
    assert prompts[1].max_tokens is None


def test_to_json_round_trips_through_load_jsonl(tmp_path: Path) -> None:
    originals = [
        Prompt(id="x", category="chat", messages=tuple(chat("hello")), max_tokens=16),
        Prompt(id="y", category="raw", prompt="The quick brown fox"),
    ]
    path = write_jsonl(tmp_path / "rt.jsonl", [p.to_json() for p in originals])
    assert load_jsonl(path) == originals
    assert "prompt" not in originals[0].to_json()
    assert "max_tokens" not in originals[1].to_json()


def test_prompt_is_hashable_and_needs_exactly_one_input() -> None:
    p = Prompt(id="x", category="chat", messages=tuple(chat("hi")))
    assert p in {p}
    with pytest.raises(SpeclabError):
        Prompt(id="z", category="chat")


def test_load_prompts_dispatches_and_filters(tmp_path: Path) -> None:
    assert load_prompts(None) == load_builtin()
    assert load_prompts("builtin", ["summarization"]) == load_builtin(["summarization"])
    path = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"category": "a", "prompt": "1"},
            {"category": "b", "prompt": "2"},
            {"category": "a", "prompt": "3"},
        ],
    )
    assert [p.id for p in load_prompts(path, ["a"])] == ["p-1", "p-3"]
    with pytest.raises(SpeclabError, match="'c'.*pick from a, b"):
        load_prompts(path, ["c"])


def test_load_prompts_rejects_unknown_source_kind(tmp_path: Path) -> None:
    path = tmp_path / "prompts.txt"
    path.write_text("hello\n")
    with pytest.raises(SpeclabError, match="prompts.txt"):
        load_prompts(path)


# ------------------------------------------------------------------------------ ShareGPT


def test_load_sharegpt_keeps_up_to_last_human_turn(tmp_path: Path) -> None:
    data = [
        {
            "id": "conv1",
            "conversations": [
                {"from": "system", "value": "Be brief."},
                {"from": "human", "value": "Hi"},
                {"from": "gpt", "value": "Hello!"},
                {"from": "human", "value": "Tell me a joke."},
                {"from": "gpt", "value": "Why did the ..."},
            ],
        },
        {"conversations": [{"from": "gpt", "value": "no human here"}]},
        {"conversations": [{"from": "human", "value": "Only a question"}]},
        {"id": "conv1", "conversations": [{"from": "human", "value": "dup id"}]},
    ]
    path = tmp_path / "share.json"
    path.write_text(json.dumps(data, indent=2))
    prompts = load_sharegpt(path)
    assert [p.id for p in prompts] == ["conv1", "share-3", "conv1~4"]
    assert all(p.category == "sharegpt" and p.max_tokens is None for p in prompts)
    assert prompts[0].messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Tell me a joke."},
    )
    assert load_prompts(path)[1].messages == ({"role": "user", "content": "Only a question"},)
    assert load_sharegpt(path, category="chat")[0].category == "chat"


def test_sharegpt_bad_speaker_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "share.json"
    path.write_text(
        '[\n  {"conversations": [{"from": "human", "value": "ok"}]},\n'
        '  {"conversations": [{"from": "robot", "value": "?"}]}\n]\n'
    )
    with pytest.raises(SpeclabError, match=r"share\.json line 3 .*'robot'"):
        load_sharegpt(path)


def test_sharegpt_bad_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "share.json"
    path.write_text('[\n  {"conversations": []},\n  {"conversations": [}\n]\n')
    with pytest.raises(SpeclabError, match=r"share\.json line 3:"):
        load_sharegpt(path)


def test_sharegpt_without_human_turns_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "share.json"
    path.write_text(json.dumps([{"conversations": [{"from": "gpt", "value": "x"}]}]))
    with pytest.raises(SpeclabError, match="no conversation with a human turn"):
        load_sharegpt(path)


# ---------------------------------------------------------------------------- error cases

GOOD = {"category": "chat", "messages": chat("ok")}

BAD_LINES = [
    pytest.param("{not json", "not valid JSON", id="bad-json"),
    pytest.param('["a list"]', "not a JSON object", id="not-object"),
    pytest.param({"messages": chat("x")}, "'category' is missing", id="missing-category"),
    pytest.param(
        {"category": "c", "messages": chat("x"), "prompt": "y"},
        "both 'messages' and 'prompt'",
        id="both",
    ),
    pytest.param({"category": "c"}, "neither 'messages' nor 'prompt'", id="neither"),
    pytest.param(
        {"category": "c", "messages": [{"role": "robot", "content": "x"}]},
        "role 'robot'",
        id="bad-role",
    ),
    pytest.param(
        {"category": "c", "messages": [{"role": "user"}]}, "no text 'content'", id="no-content"
    ),
    pytest.param({"category": "c", "messages": []}, "non-empty list", id="empty-messages"),
    pytest.param({"category": "c", "prompt": "x", "max_tokens": 0}, "max_tokens is 0", id="zero"),
    pytest.param(
        {"category": "c", "prompt": "x", "max_tokens": -5}, "max_tokens is -5", id="negative"
    ),
    pytest.param(
        {"category": "c", "prompt": "x", "max_tokens": "64"}, "max_tokens is '64'", id="string"
    ),
    pytest.param(
        {"category": "c", "prompt": "x", "max_token": 5}, "unknown field 'max_token'", id="typo"
    ),
    pytest.param({"id": "", "category": "c", "prompt": "x"}, "'id' is ''", id="empty-id"),
    pytest.param({"id": "p-1", "category": "c", "prompt": "x"}, "already used", id="dup-id"),
]


@pytest.mark.parametrize(("bad", "expected"), BAD_LINES)
def test_bad_line_gives_one_sentence_with_file_and_line(
    tmp_path: Path, bad: object, expected: str
) -> None:
    # Line 1 good (id p-1), line 2 blank, line 3 bad: the message must say line 3.
    path = write_jsonl(tmp_path / "p.jsonl", [GOOD, "", bad])
    with pytest.raises(SpeclabError) as err:
        load_jsonl(path)
    message = str(err.value)
    assert "p.jsonl line 3:" in message and expected in message, message
    assert "\n" not in message and "Traceback" not in message
    assert message.endswith(".")


def test_unreadable_file_is_a_speclab_error(tmp_path: Path) -> None:
    with pytest.raises(SpeclabError, match="missing.jsonl cannot be read"):
        load_jsonl(tmp_path / "missing.jsonl")
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(SpeclabError, match="dir.jsonl cannot be read"):
        load_prompts(tmp_path / "dir.jsonl")


def test_non_utf8_file_is_a_speclab_error(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"category": "c", "prompt": "caf\xe9"}\n')
    with pytest.raises(SpeclabError, match="not UTF-8"):
        load_jsonl(path)


def test_empty_file_is_a_speclab_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(SpeclabError, match="empty.jsonl holds no prompts"):
        load_jsonl(path)


# -------------------------------------------------------------------- selection, batches


def make(category: str, n: int) -> list[Prompt]:
    return [Prompt(id=f"{category}-{i}", category=category, prompt=f"{i}") for i in range(n)]


def test_select_prompts_is_first_n_per_category_in_given_order() -> None:
    prompts = make("a", 5) + make("b", 5)
    chosen = select_prompts(prompts, ["b", "a"], per_category=2)
    assert [p.id for p in chosen] == ["b-0", "b-1", "a-0", "a-1"]
    assert select_prompts(prompts) == prompts
    assert select_prompts(prompts, per_category=2) == select_prompts(prompts, per_category=2)


def test_select_prompts_errors_and_shortfall_warning() -> None:
    prompts = make("a", 2)
    with pytest.raises(SpeclabError, match="'z'.*pick from a"):
        select_prompts(prompts, ["z"])
    with pytest.raises(SpeclabError, match="per_category is 0"):
        select_prompts(prompts, per_category=0)
    with pytest.raises(SpeclabError, match="No prompts"):
        select_prompts([])
    with pytest.warns(UserWarning, match="only 2 prompts"):
        assert len(select_prompts(prompts, per_category=5)) == 2


def test_distinct_batches_are_disjoint_when_enough_prompts() -> None:
    prompts = make("a", 9) + make("b", 6)
    batches = distinct_batches(prompts, n_batches=3, per_batch_per_category=2)
    assert len(batches) == 3
    for batch in batches:
        assert Counter(p.category for p in batch) == {"a": 2, "b": 2}
    ids = [p.id for batch in batches for p in batch]
    assert len(ids) == len(set(ids))


def test_distinct_batches_on_builtin_set_are_disjoint() -> None:
    batches = distinct_batches(load_builtin(), n_batches=3, per_batch_per_category=4)
    seen = [{p.id for p in b} for b in batches]
    assert all(len(b) == 4 * len(BUILTIN_CATEGORIES) for b in seen)
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])


def test_distinct_batches_reuse_round_robin_with_a_warning() -> None:
    prompts = make("a", 3)
    with pytest.warns(PromptReuseWarning, match="'a' has 3 prompts"):
        batches = distinct_batches(prompts, n_batches=2, per_batch_per_category=2)
    assert [[p.id for p in b] for b in batches] == [["a-0", "a-1"], ["a-2", "a-0"]]


def test_distinct_batches_rejects_bad_counts() -> None:
    with pytest.raises(SpeclabError, match="n_batches is 0"):
        distinct_batches(make("a", 3), n_batches=0, per_batch_per_category=1)
    with pytest.raises(SpeclabError, match="per_batch_per_category is -1"):
        distinct_batches(make("a", 3), n_batches=1, per_batch_per_category=-1)
    with pytest.raises(SpeclabError, match="no prompts"):
        distinct_batches([], n_batches=1, per_batch_per_category=1)
