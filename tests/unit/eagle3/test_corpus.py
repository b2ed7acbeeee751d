"""The head's training corpus is its own: no benchmark prompt, spread over the categories."""

from __future__ import annotations

from speclab.eagle3.corpus import training_corpus
from speclab.prompts import BUILTIN_CATEGORIES, load_builtin


def _texts(messages: list[dict]) -> str:
    return "\n".join(m["content"] for m in messages)


def test_no_training_prompt_contains_a_benchmark_prompt() -> None:
    bench_texts = set()
    for prompt in load_builtin():
        bench_texts |= {m["content"].strip() for m in (prompt.messages or ()) if m["role"] == "user"}
        if prompt.prompt:
            bench_texts.add(prompt.prompt.strip())
    assert len(bench_texts) > 100
    corpus = training_corpus(280)
    for item in corpus:
        text = _texts(item["messages"])
        assert not any(b in text for b in bench_texts if len(b) > 40), item["id"]


def test_the_corpus_is_distinct_reproducible_and_covers_every_category() -> None:
    corpus = training_corpus(280)
    assert len(corpus) == 280 and len({repr(c["messages"]) for c in corpus}) == 280
    assert {c["category"] for c in corpus} == set(BUILTIN_CATEGORIES)
    assert training_corpus(280) == corpus and training_corpus(280, seed=1) != corpus
