"""Prompt sets: the built-in Spec-Bench-style categories, user JSONL files and ShareGPT dumps.

Speculative decoding pays off very differently per task (copy-heavy code edits and
extractive QA accept many draft tokens; open-ended chat accepts few), so every prompt
carries a category and results are reported per category. Every bad input becomes one
:class:`~speclab.errors.SpeclabError` sentence naming the file, the line and the fix.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from speclab.errors import SpeclabError

__all__ = [
    "BUILTIN_CATEGORIES",
    "Prompt",
    "PromptReuseWarning",
    "distinct_batches",
    "load_builtin",
    "load_jsonl",
    "load_prompts",
    "load_sharegpt",
    "select_prompts",
]

BUILTIN_CATEGORIES: tuple[str, ...] = (
    "multi_turn",
    "code_generation",
    "code_editing",
    "summarization",
    "math_reasoning",
    "extractive_qa",
    "translation",
)

CHAT_ROLES: tuple[str, ...] = ("system", "user", "assistant")

# ShareGPT dumps name speakers inconsistently; real files use all of these.
SHAREGPT_ROLES: dict[str, str] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "assistant": "assistant",
    "system": "system",
}

_RECORD_FIELDS = ("id", "category", "messages", "prompt", "max_tokens")


class PromptReuseWarning(UserWarning):
    """Issued by :func:`distinct_batches` when a prompt has to appear in more than one batch."""


@dataclass(frozen=True)
class Prompt:
    """One benchmark request input: chat ``messages`` or plain-completion ``prompt``, never both.

    ``max_tokens`` is the prompt's own default output budget (``None``: the caller decides).
    Prompts hash by id, category, prompt and max_tokens, so they can go into sets.
    """

    id: str
    category: str
    # Dicts are unhashable; leaving messages out of the hash keeps Prompt usable in sets.
    messages: tuple[dict[str, str], ...] | None = field(default=None, hash=False)
    prompt: str | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise SpeclabError(
                f"Prompt {self.id!r} must have exactly one of 'messages' and 'prompt'; "
                "give one of them."
            )
        if self.messages is not None:
            # Copy into a tuple of fresh dicts so a caller's later edits cannot reach us.
            object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict in the user JSONL format; :func:`load_jsonl` reads it back unchanged.

        Only the one of ``messages``/``prompt`` that is set appears, and ``max_tokens`` only
        when it is set.
        """
        out: dict[str, Any] = {"id": self.id, "category": self.category}
        if self.messages is not None:
            out["messages"] = [dict(m) for m in self.messages]
        else:
            out["prompt"] = self.prompt
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        return out


# ---------------------------------------------------------------------------- loaders


def load_builtin(categories: Sequence[str] | None = None) -> list[Prompt]:
    """The prompts shipped with speclab, categories in the given order (default: all, in
    :data:`BUILTIN_CATEGORIES` order), prompts in file order.

    Raises SpeclabError for a category that is not built in (the message lists them).
    """
    wanted = _check_categories(categories, BUILTIN_CATEGORIES, "the built-in prompt set")
    root = resources.files("speclab") / "data" / "prompts"
    prompts: list[Prompt] = []
    for category in wanted:
        name = f"{category}.jsonl"
        try:
            text = (root / name).read_text(encoding="utf-8")
        except OSError as exc:
            raise SpeclabError(
                f"The built-in prompt file {name} cannot be read ({_reason(exc)}); "
                "reinstall speclab."
            ) from None
        prompts.extend(_parse_jsonl_text(text, label=f"built-in {name}", stem=category))
    return prompts


def load_jsonl(path: str | Path) -> list[Prompt]:
    """Prompts from a user JSONL file, one object per line, in file order.

    Each line holds ``category``, one of ``messages`` (a list of ``{"role", "content"}``
    with role system, user or assistant) or ``prompt`` (plain text), and optionally
    ``max_tokens`` (a positive integer) and ``id``. A missing id becomes
    ``<file stem>-<line number>``; blank lines are skipped. Any bad line, a duplicate id
    or a file without prompts raises SpeclabError naming the file and line.
    """
    path = Path(path)
    text = _read_text(path)
    prompts = _parse_jsonl_text(text, label=str(path), stem=path.stem)
    if not prompts:
        raise SpeclabError(
            f"{path} holds no prompts; write one JSON object per line, e.g. "
            '{"category": "chat", "prompt": "Hello"}.'
        )
    return prompts


def load_sharegpt(path: str | Path, category: str = "sharegpt") -> list[Prompt]:
    """Prompts from a ShareGPT-format JSON file: a list of
    ``{"id"?, "conversations": [{"from": "human"|"gpt"|"system", "value": str}, ...]}``.

    Each conversation is kept up to and including its last human turn (the trailing
    answer is what the server will generate), with speakers mapped to user, assistant and
    system. Entries with no human turn are skipped. A missing id becomes
    ``<file stem>-<entry number>`` (1-based); a repeated id gets ``~<entry number>``
    appended, because public dumps contain duplicates the user cannot easily fix.
    All prompts get ``category`` and ``max_tokens=None``.
    """
    path = Path(path)
    text = _read_text(path)
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for number, line, entry in _iter_json_array(text, str(path)):
        where = f"{path} line {line} (entry {number})"
        if not isinstance(entry, dict):
            raise SpeclabError(
                f"{where}: the entry is not a JSON object; give each entry a 'conversations' list."
            )
        turns = entry.get("conversations")
        if not isinstance(turns, list):
            raise SpeclabError(
                f"{where}: 'conversations' is missing or not a list; give each entry a list "
                'of {"from": ..., "value": ...} turns.'
            )
        messages: list[dict[str, str]] = []
        last_user = -1
        for i, turn in enumerate(turns, 1):
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise SpeclabError(
                    f"{where}: turn {i} is not an object with a text 'value'; give each turn "
                    '{"from": ..., "value": "..."}.'
                )
            speaker = turn.get("from")
            role = SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
            if role is None:
                raise SpeclabError(
                    f"{where}: turn {i} has 'from' {speaker!r}; use 'human', 'gpt' or 'system'."
                )
            messages.append({"role": role, "content": turn["value"]})
            if role == "user":
                last_user = len(messages) - 1
        if last_user < 0:
            continue  # nothing for the model to answer
        raw_id = entry.get("id")
        pid = str(raw_id) if isinstance(raw_id, (str, int)) and str(raw_id) else None
        pid = pid or f"{path.stem}-{number}"
        if pid in seen:
            pid = f"{pid}~{number}"
        seen.add(pid)
        prompts.append(Prompt(id=pid, category=category, messages=tuple(messages[: last_user + 1])))
    if not prompts:
        raise SpeclabError(
            f"{path} holds no conversation with a human turn; give at least one entry whose "
            "'conversations' include a turn from 'human'."
        )
    return prompts


def load_prompts(
    source: str | Path | None, categories: Sequence[str] | None = None
) -> list[Prompt]:
    """Prompts from ``source``: ``None`` or ``"builtin"`` for the built-in set, a ``.jsonl``
    path for :func:`load_jsonl`, a ``.json`` path for :func:`load_sharegpt`.

    With ``categories``, only those categories are kept, in source order; asking for a
    category the source lacks raises SpeclabError listing the ones it has.
    """
    if source is None or (isinstance(source, str) and source.strip().lower() == "builtin"):
        return load_builtin(categories)
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        prompts = load_jsonl(path)
    elif suffix == ".json":
        prompts = load_sharegpt(path)
    else:
        raise SpeclabError(
            f"The prompt source {str(source)!r} is neither 'builtin' nor a .jsonl or .json file; "
            "give 'builtin', a JSONL prompt file or a ShareGPT .json file."
        )
    if categories is None:
        return prompts
    wanted = set(_check_categories(categories, _categories_of(prompts), str(path)))
    return [p for p in prompts if p.category in wanted]


# -------------------------------------------------------------------------- selection


def select_prompts(
    prompts: Sequence[Prompt],
    categories: Sequence[str] | None = None,
    per_category: int | None = None,
) -> list[Prompt]:
    """The first ``per_category`` prompts (all when ``None``) of each category, in input
    order, categories in the given order (default: order of first appearance).

    Deterministic: the same input always gives the same list. A category with fewer prompts
    than asked gives all it has and issues a UserWarning saying so. Raises SpeclabError for an unknown category, a non-positive
    ``per_category`` or an empty result.
    """
    if per_category is not None and (_not_int(per_category) or per_category < 1):
        raise SpeclabError(
            f"per_category is {per_category!r}; give a positive whole number or None for all."
        )
    known = _categories_of(prompts)
    wanted = _check_categories(categories, known, "the prompt set")
    groups = _group(prompts)
    selected: list[Prompt] = []
    for category in wanted:
        group = groups[category]
        if per_category is not None and len(group) < per_category:
            warnings.warn(
                f"Category {category!r} has only {len(group)} prompts, fewer than the "
                f"{per_category} asked for; using all of them.",
                UserWarning,
                stacklevel=2,
            )
        selected.extend(group if per_category is None else group[:per_category])
    if not selected:
        raise SpeclabError("No prompts were selected; give a non-empty prompt set.")
    return selected


def distinct_batches(
    prompts: Sequence[Prompt], n_batches: int, per_batch_per_category: int | Sequence[int]
) -> list[list[Prompt]]:
    """``n_batches`` lists (one per repeat or arm), each with ``per_batch_per_category``
    prompts of every category, grouped by category in order of first appearance.

    ``per_batch_per_category`` is one count for every batch, or one count per batch (a level
    at high concurrency needs more prompts than one at concurrency 1). Batch ``b`` takes the
    next ``k_b`` prompts of each category after those of batches ``0 .. b-1``, so no prompt
    appears in two batches while a category has ``sum(k)`` prompts or more: a repeated prompt
    would hit the server's prefix cache (and n-gram/suffix drafters' memory) and look faster
    than it is. When a category is too small, indices wrap round-robin and a
    :class:`PromptReuseWarning` is issued (one per short category) naming how many prompts are
    reused; the batches are still returned. Raises SpeclabError for an empty prompt list or a
    non-positive count.
    """
    if _not_int(n_batches) or n_batches < 1:
        raise SpeclabError(f"n_batches is {n_batches!r}; give a positive whole number.")
    counts = ([per_batch_per_category] * n_batches if isinstance(per_batch_per_category, int)
              else list(per_batch_per_category))
    if len(counts) != n_batches:
        raise SpeclabError(f"per_batch_per_category has {len(counts)} counts for {n_batches} batches; "
                           "give one count per batch.")
    for value in counts:
        if _not_int(value) or value < 1:
            raise SpeclabError(f"per_batch_per_category is {value!r}; give a positive whole number.")
    if not prompts:
        raise SpeclabError("There are no prompts to split into batches; load a prompt set first.")
    needed = sum(counts)
    starts = [sum(counts[:b]) for b in range(n_batches)]
    batches: list[list[Prompt]] = [[] for _ in range(n_batches)]
    for category, group in _group(prompts).items():
        if len(group) < needed:
            shape = (f"{n_batches} batches x {counts[0]}" if len(set(counts)) == 1
                     else f"{n_batches} batches of {'/'.join(map(str, counts))}")
            warnings.warn(
                f"Category {category!r} has {len(group)} prompts but {shape} "
                f"need {needed}; {needed - len(group)} slots reuse earlier prompts, which "
                "prefix caching can make look faster.",
                PromptReuseWarning,
                stacklevel=2,
            )
        for b in range(n_batches):
            batches[b].extend(group[(starts[b] + j) % len(group)] for j in range(counts[b]))
    return batches


# --------------------------------------------------------------------------- helpers


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpeclabError(f"{path} is not UTF-8 text; save it as UTF-8 and try again.") from None
    except OSError as exc:
        raise SpeclabError(
            f"The prompt file {path} cannot be read ({_reason(exc)}); check the path and "
            "its permissions."
        ) from None


def _reason(exc: OSError) -> str:
    return (exc.strerror or type(exc).__name__).lower()


def _not_int(value: object) -> bool:
    # bool is an int subclass, but max_tokens=true is a mistake, not 1.
    return not isinstance(value, int) or isinstance(value, bool)


def _parse_jsonl_text(text: str, label: str, stem: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    first_line_of: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{label} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpeclabError(
                f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); fix the line "
                "or delete it."
            ) from None
        prompt = _parse_record(record, where, default_id=f"{stem}-{number}")
        if prompt.id in first_line_of:
            raise SpeclabError(
                f"{where}: id {prompt.id!r} is already used on line "
                f"{first_line_of[prompt.id]}; give each prompt a unique id."
            )
        first_line_of[prompt.id] = number
        prompts.append(prompt)
    return prompts


def _parse_record(record: object, where: str, default_id: str) -> Prompt:
    """One validated Prompt from a JSONL object; ``where`` ("file line N") starts every error."""
    if not isinstance(record, dict):
        raise SpeclabError(
            f"{where}: the line is not a JSON object; write one {{...}} object per line."
        )
    unknown = [k for k in record if k not in _RECORD_FIELDS]
    if unknown:
        # Catches typos such as "max_token" that would otherwise be silently ignored.
        raise SpeclabError(
            f"{where}: unknown field {unknown[0]!r}; use only {', '.join(_RECORD_FIELDS)}."
        )
    category = record.get("category")
    if not isinstance(category, str) or not category.strip():
        raise SpeclabError(
            f"{where}: 'category' is missing or empty; give each prompt a category, "
            'e.g. "category": "chat".'
        )
    raw_id = record.get("id")
    if raw_id is None:
        pid = default_id
    elif isinstance(raw_id, str) and raw_id.strip():
        pid = raw_id
    else:
        raise SpeclabError(f"{where}: 'id' is {raw_id!r}; give a non-empty string or leave it out.")

    has_messages = record.get("messages") is not None
    has_prompt = record.get("prompt") is not None
    if has_messages and has_prompt:
        raise SpeclabError(f"{where}: both 'messages' and 'prompt' are set; keep only one of them.")
    if not has_messages and not has_prompt:
        raise SpeclabError(f"{where}: neither 'messages' nor 'prompt' is set; give one of them.")

    messages: tuple[dict[str, str], ...] | None = None
    text: str | None = None
    if has_messages:
        messages = _parse_messages(record["messages"], where)
    else:
        text = record["prompt"]
        if not isinstance(text, str) or not text:
            raise SpeclabError(f"{where}: 'prompt' must be non-empty text; give the prompt string.")

    max_tokens = record.get("max_tokens")
    if max_tokens is not None and (_not_int(max_tokens) or max_tokens < 1):
        raise SpeclabError(
            f"{where}: max_tokens is {max_tokens!r}; give a positive whole number or leave it out."
        )
    return Prompt(id=pid, category=category, messages=messages, prompt=text, max_tokens=max_tokens)


def _parse_messages(raw: object, where: str) -> tuple[dict[str, str], ...]:
    if not isinstance(raw, list) or not raw:
        raise SpeclabError(
            f"{where}: 'messages' must be a non-empty list; give "
            '[{"role": "user", "content": "..."}].'
        )
    messages: list[dict[str, str]] = []
    for i, message in enumerate(raw, 1):
        if not isinstance(message, dict):
            raise SpeclabError(
                f'{where}: message {i} is not an object; give {{"role": ..., "content": ...}}.'
            )
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise SpeclabError(
                f"{where}: message {i} has role {role!r}; use 'system', 'user' or 'assistant'."
            )
        if not isinstance(message.get("content"), str):
            raise SpeclabError(
                f"{where}: message {i} has no text 'content'; give its content as a string."
            )
        if any(not isinstance(v, str) for v in message.values()):
            raise SpeclabError(
                f"{where}: message {i} has a non-text field; keep every message field a string."
            )
        messages.append(dict(message))
    return tuple(messages)


def _iter_json_array(text: str, label: str) -> Iterable[tuple[int, int, Any]]:
    """Yield (entry number, line number, value) for each element of a top-level JSON array.

    Decoding element by element (rather than json.loads of the whole file) is what lets
    errors about an entry name the line it starts on.
    """
    decoder = json.JSONDecoder()

    def fail(exc: json.JSONDecodeError) -> SpeclabError:
        return SpeclabError(
            f"{label} line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno}); "
            "fix the file or export it again."
        )

    def skip_ws(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n\ufeff":
            i += 1
        return i

    i = skip_ws(0)
    if i >= len(text) or text[i] != "[":
        raise SpeclabError(
            f"{label} line {text.count(chr(10), 0, i) + 1}: the file is not a JSON list; "
            'give a ShareGPT file, i.e. a list of {"conversations": [...]} entries.'
        )
    i = skip_ws(i + 1)
    if i < len(text) and text[i] == "]":
        return
    number = 0
    while True:
        number += 1
        line = text.count("\n", 0, i) + 1
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise fail(exc) from None
        yield number, line, value
        i = skip_ws(i)
        if i < len(text) and text[i] == ",":
            i = skip_ws(i + 1)
            continue
        if i < len(text) and text[i] == "]":
            break
        msg = "Expecting ',' delimiter or ']'"
        raise fail(json.JSONDecodeError(msg, text, i))
    if skip_ws(i + 1) != len(text):
        raise fail(json.JSONDecodeError("Extra data after the list", text, skip_ws(i + 1)))


def _categories_of(prompts: Iterable[Prompt]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.category for p in prompts))


def _group(prompts: Iterable[Prompt]) -> dict[str, list[Prompt]]:
    groups: dict[str, list[Prompt]] = {}
    for p in prompts:
        groups.setdefault(p.category, []).append(p)
    return groups


def _check_categories(
    categories: Sequence[str] | None, known: Sequence[str], source: str
) -> tuple[str, ...]:
    """The asked-for categories, de-duplicated in order (all of ``known`` when None)."""
    if categories is None:
        return tuple(known)
    if isinstance(categories, str):
        categories = [categories]  # one name, not a sequence of letters
    wanted = tuple(dict.fromkeys(categories))
    if not wanted:
        raise SpeclabError(f"No categories were asked for; pick from {', '.join(known)}.")
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise SpeclabError(
            f"Unknown category {unknown[0]!r} for {source}; pick from {', '.join(known)}."
        )
    return wanted
