"""A training prompt corpus for the embedded model's EAGLE-3 head, apart from the benchmark's.

The head must be trained on the model's own answers to prompts *like* the traffic it will
serve, but never on the benchmark prompts in `data/prompts/` (that would measure
memorisation). These prompts are built from templates and word lists written for this
purpose, one per built-in category, deterministically from a seed; a unit test checks that
no training prompt equals or contains a benchmark prompt.
"""

from __future__ import annotations

import random
from typing import Any

_NOUNS = ["invoice", "sensor", "ticket", "order", "student", "sample", "package", "meeting", "booking",
          "recipe", "account", "vehicle", "shipment", "playlist", "reading", "patient", "contract", "device"]
_FIELDS = ["price", "weight", "count", "score", "duration", "distance", "rating", "balance", "level", "size"]
_TOPICS = ["coral reefs", "the printing press", "electric buses", "honey bees", "urban gardens", "tidal power",
           "the Silk Road", "volcanic soil", "night trains", "public libraries", "glaciers", "solar ovens",
           "paper recycling", "bird migration", "cargo bikes", "wind farms", "river deltas", "lighthouses",
           "desert plants", "the telegraph", "rainwater tanks", "mountain huts", "ferry routes", "bamboo houses"]
_PEOPLE = ["Amara Okafor", "Lena Fischer", "Tomas Ruiz", "Mei Lin", "Jonas Berg", "Priya Nair", "Omar Haddad",
           "Sofia Rossi", "Kenji Sato", "Elif Demir", "Noah Walsh", "Ines Costa"]
_CITIES = ["Porto", "Tampere", "Valparaiso", "Kochi", "Ghent", "Brno", "Leon", "Tartu", "Mombasa", "Hobart"]
_LANGS = ["French", "Spanish", "German", "Italian", "Portuguese"]
_TASKS = [
    "returns the second largest number in a list", "counts the vowels in a string",
    "checks whether a string is a palindrome ignoring spaces", "merges two sorted lists into one sorted list",
    "removes duplicate items from a list while keeping their order", "converts Celsius to Fahrenheit",
    "returns the n-th Fibonacci number iteratively", "groups words by their first letter into a dict",
    "computes the median of a list of numbers", "flattens a list of lists", "reverses the words in a sentence",
    "returns the most common character in a string", "validates that a string is a simple email address",
    "splits a list into chunks of size n", "computes a running total of a list",
    "returns the keys of a dict sorted by their values", "counts lines in a text file",
    "rotates a list to the right by k places", "returns the greatest common divisor of two integers",
    "converts a list of pairs into a dict", "checks whether two strings are anagrams",
]
_SENTENCES = [
    "The {noun} arrived late because the road was closed.", "Please send the report before Friday.",
    "We visited {city} last summer and loved the old harbour.", "The museum opens at nine in the morning.",
    "My brother is learning to cook simple dishes.", "The train to {city} leaves from platform four.",
    "Water the plants twice a week during the summer.", "She wrote a short letter to her grandmother.",
    "The meeting was moved to the large room upstairs.", "This bakery sells fresh bread every morning.",
]


def _code_snippet(rng: random.Random) -> tuple[str, str, str]:
    noun, field, other = rng.choice(_NOUNS), rng.choice(_FIELDS), rng.choice(_FIELDS)
    var = f"{noun}s"
    code = (
        f"def total_{field}({var}):\n"
        f"    result = 0\n"
        f"    for item in {var}:\n"
        f"        if item.get(\"{other}\", 0) > 0:\n"
        f"            result = result + item[\"{field}\"]\n"
        f"    return result\n\n\n"
        f"def describe({var}):\n"
        f"    total = total_{field}({var})\n"
        f"    return f\"{{len({var})}} {noun}s, {field} {{total}}\"\n"
    )
    return code, var, field


def _code_editing(rng: random.Random) -> list[dict[str, str]]:
    code, var, field = _code_snippet(rng)
    edits = [
        f"Rename the variable `{var}` to `records` everywhere in this code.",
        "Add a one-line docstring to each function and change nothing else.",
        "Replace the for loop in the first function with a generator expression passed to sum().",
        f"Add type hints to both functions; `{var}` is a list of dicts.",
        f"Rename the function `total_{field}` to `sum_{field}` and update its caller.",
    ]
    return [{"role": "system", "content": "You edit code exactly as asked and return the whole edited code."},
            {"role": "user", "content": f"{rng.choice(edits)}\n\n```python\n{code}```"}]


def _code_generation(rng: random.Random) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a short Python function that {rng.choice(_TASKS)}. Include one example call."}]


def _paragraph(rng: random.Random) -> str:
    topic, city, year = rng.choice(_TOPICS), rng.choice(_CITIES), rng.randint(1850, 2020)
    person = rng.choice(_PEOPLE)
    return (f"A recent local study in {city} looked at {topic}. The work began in {year} under {person}, "
            f"who wanted to know how {topic} change over time. The team collected notes every season, "
            f"spoke with residents and compared their findings with older records. They found that small, "
            f"steady changes mattered more than rare large events, and they suggested simple ways to keep "
            f"track of {topic} in the future.")


def _summarization(rng: random.Random) -> list[dict[str, str]]:
    ask = rng.choice(["Summarize this in two sentences:", "Give a one-sentence summary of this text:",
                      "Summarize the main finding of this paragraph:"])
    return [{"role": "user", "content": f"{ask}\n\n{_paragraph(rng)}"}]


def _math(rng: random.Random) -> list[dict[str, str]]:
    a, b, c = rng.randint(3, 40), rng.randint(2, 15), rng.randint(2, 9)
    noun = rng.choice(_NOUNS)
    questions = [
        f"A shop has {a} boxes with {b} {noun}s in each box. It sells {c} boxes. How many {noun}s are left? Explain step by step.",
        f"Tickets cost {b} dollars each. A group buys {a} tickets and pays with {a * b + c * 5} dollars. How much change do they get? Show your work.",
        f"A cyclist rides {a} km on Monday and {b} km more each day after that. How far does she ride on the {c}th day? Reason step by step.",
    ]
    return [{"role": "user", "content": rng.choice(questions)}]


def _extractive_qa(rng: random.Random) -> list[dict[str, str]]:
    text = _paragraph(rng)
    question = rng.choice(["Who led the work?", "When did the work begin?", "In which city was the study done?",
                           "What did the team find?"])
    return [{"role": "user", "content": f"Answer using only the text, quoting it where you can.\n\nText: {text}\n\nQuestion: {question}"}]


def _translation(rng: random.Random) -> list[dict[str, str]]:
    sentences = [s.format(noun=rng.choice(_NOUNS), city=rng.choice(_CITIES)) for s in rng.sample(_SENTENCES, 2)]
    return [{"role": "user", "content": f"Translate into {rng.choice(_LANGS)}: {' '.join(sentences)}"}]


def _multi_turn(rng: random.Random) -> list[dict[str, str]]:
    topic = rng.choice(_TOPICS)
    return [{"role": "user", "content": f"What are {topic}?"},
            {"role": "assistant", "content": f"{topic.capitalize()} are a subject many people find interesting; "
                                             "they touch on nature, history and daily life."},
            {"role": "user", "content": rng.choice([f"Tell me three facts about {topic}.",
                                                    f"Why do people care about {topic}?",
                                                    f"Write a short poem about {topic}."])}]


_BUILDERS = {
    "code_editing": _code_editing, "code_generation": _code_generation, "summarization": _summarization,
    "math_reasoning": _math, "extractive_qa": _extractive_qa, "translation": _translation,
    "multi_turn": _multi_turn,
}


def training_corpus(n: int = 280, seed: int = 0) -> list[dict[str, Any]]:
    """`n` distinct chat prompts spread evenly over the built-in categories, reproducibly."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    names = sorted(_BUILDERS)
    attempts = 0
    while len(out) < n and attempts < n * 20:
        category = names[attempts % len(names)]
        attempts += 1
        messages = _BUILDERS[category](rng)
        key = repr(messages)
        if key in seen:
            continue
        seen.add(key)
        out.append({"id": f"train-{category}-{len(out):04d}", "category": category, "messages": messages})
    return out
