"""The served model's own tokenizer, from its local folder: log records to token ids.

The server turns chat messages into ``prompt_token_ids`` by rendering the model's chat
template (``tokenizer_config.json``'s ``chat_template``, Jinja) with the generation prompt
and encoding the text without adding special tokens again (what Transformers'
``apply_chat_template(tokenize=True)`` does, and vLLM calls it). Here the template is
rendered with Jinja in a sandbox and the text encoded with Hugging Face ``tokenizers``
in batches (Rust, no Transformers or torch needed). A completion is encoded the same way;
``finish_reason == "stop"`` adds the EOS token the model emitted.

Re-encoding logged text is not always the token sequence the model sampled (a tokenizer
can spell one string several ways); :func:`speclab.traffic.workbook.check_against_server`
compares prompts with the server's own ``/tokenize`` on a sample, and ``output_token_ids`` in the log, when present,
are used as they are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclab.errors import SpeclabError
from speclab.traffic.logs import LogRecord

__all__ = ["ChatTokenizer", "TokenizedBatch"]


@dataclass
class TokenizedBatch:
    """Token ids of a batch's records, in record order."""

    prompts: list[Any]  # per record: a list or an int64 array of ids
    outputs: list[Any]


def _token_text(value: Any) -> str | None:
    """A special token from tokenizer_config.json: a string or an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


class ChatTokenizer:
    """Tokenizer + chat template of a model folder (``tokenizer.json``, ``tokenizer_config.json``).

    Picklable through :meth:`state` / :meth:`from_state`, so Ray workers rebuild it without
    the folder (a cluster node need not have the model).
    """

    def __init__(self, tokenizer_json: str, config: dict[str, Any], source: str = "") -> None:
        from tokenizers import Tokenizer

        self._json = tokenizer_json
        self.config = config
        self.source = source
        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.eos_token = _token_text(config.get("eos_token"))
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_id = self.tokenizer.token_to_id(self.eos_token) if self.eos_token else None
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        self._template = self._compile(template) if template else None

    @staticmethod
    def _compile(source: str) -> Any:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise SpeclabError(f"The model's chat template refused the messages: {message}")

        # the environment Transformers renders chat templates in
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        return env.from_string(source)

    @classmethod
    def from_folder(cls, folder: str | Path) -> ChatTokenizer:
        """Load from a Hugging Face model folder; one clear sentence when files are missing."""
        folder = Path(folder).expanduser()
        tok = folder / "tokenizer.json"
        if not tok.exists():
            raise SpeclabError(f"{folder} has no tokenizer.json; pass the served model's local folder (--model).")
        cfg_file = folder / "tokenizer_config.json"
        config = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
        template_file = folder / "chat_template.jinja"
        if "chat_template" not in config and template_file.exists():
            config["chat_template"] = template_file.read_text()
        return cls(tok.read_text(), config, source=str(folder))

    def state(self) -> tuple[str, dict[str, Any], str]:
        return self._json, self.config, self.source

    @classmethod
    def from_state(cls, state: tuple[str, dict[str, Any], str]) -> ChatTokenizer:
        return cls(*state)

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text the server builds from chat messages (generation prompt added)."""
        if self._template is None:
            raise SpeclabError(f"{self.source or 'the tokenizer'} has no chat_template; log prompts as text or ids.")
        return self._template.render(messages=messages, add_generation_prompt=True,
                                     bos_token=self.bos_token or "", eos_token=self.eos_token or "")

    def encode_texts(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, no special tokens added (batch encode)."""
        if not texts:
            return []
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def prompt_texts(self, records: Sequence[LogRecord]) -> list[str | None]:
        return [None if r.prompt_token_ids is not None
                else (self.render(r.messages) if r.messages is not None else r.prompt or "") for r in records]

    def tokenize(self, records: Sequence[LogRecord]) -> TokenizedBatch:
        """Prompt and output ids for every record (ids in the log are kept as they are)."""
        prompt_texts = self.prompt_texts(records)
        todo = [(i, t) for i, t in enumerate(prompt_texts) if t is not None]
        encoded = dict(zip([i for i, _ in todo], self.encode_texts([t for _, t in todo]), strict=True))
        prompts = [records[i].prompt_token_ids if i not in encoded else encoded[i] for i in range(len(records))]
        out_todo = [i for i, r in enumerate(records) if r.output_token_ids is None]
        out_encoded = dict(zip(out_todo, self.encode_texts([records[i].completion or "" for i in out_todo]),
                               strict=True))
        outputs: list[Any] = []
        for i, r in enumerate(records):
            if r.output_token_ids is not None:
                outputs.append(r.output_token_ids)
                continue
            ids = out_encoded[i]
            if r.finish_reason == "stop" and self.eos_id is not None:
                ids = ids + [self.eos_id]
            outputs.append(ids)
        return TokenizedBatch(prompts, outputs)
