"""Drafter/target match check: read two `config.json` dicts, find what would waste a restart.

Pure functions on dicts (no file or network access), so the check runs before any load. It
reads the layouts vLLM 0.32 loads (`LlamaForCausalLMEagle3` from SpecForge/EAGLE, the
`Eagle3*` variants, and vllm-project/speculators' `Eagle3Speculator` with its
`speculators_config`), and targets whose text model sits under `text_config` (Kimi-K2.5,
multimodal checkpoints). What the fields mean and why each check matters: `docs/eagle3.md`.

Hard mismatches (the drafter cannot work on this target: hidden size, vocabulary, captured
layers beyond the target's depth, not an EAGLE-3 head) are errors. A drafter trained for a
*different model of the same shape* loads and runs but accepts less (a Kimi-K2 drafter on
Kimi-K2.5 gave only 1.13-1.24x on MT-Bench, SpecForge SpecBundle data): that is a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from speclab.errors import SpeclabError

# suffixes that name the drafter, not the model it drafts for
_DRAFTER_WORDS = re.compile(
    r"[-_.]?(eagle-?3(-mla)?|eagle|speculator(s)?|draft(er)?|mtp|spec)([-_.].*)?$", re.IGNORECASE
)
_VARIANT_WORDS = re.compile(r"[-_](instruct|chat|base|hf|bf16|fp8|int4|w4a8|nvfp4|awq|gptq)$", re.IGNORECASE)


@dataclass
class DrafterMatch:
    """The outcome: `errors` stop a launch, `warnings` are worth reading before one."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's own config: `text_config` for multimodal targets, else the config."""
    inner = config.get("text_config")
    if isinstance(inner, dict) and "hidden_size" in inner:
        return inner
    return config


def _drafter_layer(config: dict[str, Any]) -> dict[str, Any]:
    """speculators keeps the head's layer shape under `transformer_layer_config`."""
    inner = config.get("transformer_layer_config")
    return inner if isinstance(inner, dict) else config


def drafter_facts(config: dict[str, Any]) -> dict[str, Any]:
    """The fields of a drafter config that the match depends on, under one spelling."""
    layer = _drafter_layer(config)
    eagle = config.get("eagle_config") or {}
    aux = config.get("eagle_aux_hidden_state_layer_ids") or eagle.get("eagle_aux_hidden_state_layer_ids")
    verifier = (config.get("speculators_config") or {}).get("verifier") or {}
    vocab = layer.get("vocab_size", config.get("vocab_size"))
    return {
        "architectures": list(config.get("architectures") or []),
        "speculators_model_type": config.get("speculators_model_type"),
        "hidden_size": layer.get("hidden_size"),
        "target_hidden_size": config.get("target_hidden_size") or layer.get("hidden_size"),
        "vocab_size": vocab,
        "draft_vocab_size": config.get("draft_vocab_size") or vocab,
        "aux_layer_ids": list(aux) if aux else None,
        "verifier": verifier.get("name_or_path") or config.get("target_model") or config.get("base_model"),
        "verifier_architectures": list(verifier.get("architectures") or []),
    }


def is_eagle3(config: dict[str, Any]) -> bool:
    """True for every EAGLE-3 layout vLLM 0.32 knows (architecture names hold 'eagle3')."""
    names = [str(a).lower() for a in config.get("architectures") or []]
    return config.get("speculators_model_type") == "eagle3" or any("eagle3" in n for n in names)


def model_stem(name: str | None) -> str | None:
    """`AQ-MedAI/Kimi-K2-Instruct-eagle3` -> `kimi-k2`: the model a name refers to, lower-case.

    Drops the organisation, drafter words (eagle3, speculator, ...) and variant words
    (instruct, chat, fp8, ...), so a drafter's name can be compared with its target's.
    """
    if not name:
        return None
    stem = str(name).rstrip("/").split("/")[-1].lower()
    stem = _DRAFTER_WORDS.sub("", stem)
    previous = None
    while previous != stem:
        previous, stem = stem, _VARIANT_WORDS.sub("", stem)
    return stem or None


def check_drafter_match(
    drafter: dict[str, Any],
    target: dict[str, Any],
    *,
    drafter_name: str | None = None,
    target_name: str | None = None,
) -> DrafterMatch:
    """Compare a drafter's `config.json` with the served model's; no file or network access.

    `drafter_name` / `target_name` are the path or hub id each was loaded from (used only to
    tell which model a drafter was trained for when its config does not record it).
    """
    facts = drafter_facts(drafter)
    tgt = text_config(target)
    result = DrafterMatch(facts={"drafter": facts, "target": {
        "hidden_size": tgt.get("hidden_size"), "vocab_size": tgt.get("vocab_size"),
        "num_hidden_layers": tgt.get("num_hidden_layers"),
        "architectures": list(target.get("architectures") or []),
    }})
    if not is_eagle3(drafter):
        result.errors.append(
            f"the drafter is not an EAGLE-3 head (architectures {facts['architectures'] or 'missing'})"
        )
    hidden = tgt.get("hidden_size")
    if facts["target_hidden_size"] and hidden and int(facts["target_hidden_size"]) != int(hidden):
        result.errors.append(
            f"the drafter reads hidden states of size {facts['target_hidden_size']} but the target's are {hidden}"
        )
    vocab = tgt.get("vocab_size")
    if facts["vocab_size"] and vocab and int(facts["vocab_size"]) != int(vocab):
        result.errors.append(
            f"the drafter's vocabulary has {int(facts['vocab_size']):,} tokens but the target's has {int(vocab):,}"
            " (its token ids would mean different words)"
        )
    if facts["draft_vocab_size"] and facts["vocab_size"] and int(facts["draft_vocab_size"]) > int(facts["vocab_size"]):
        result.errors.append(
            f"draft_vocab_size {facts['draft_vocab_size']} exceeds the vocabulary {facts['vocab_size']}"
        )
    layers = tgt.get("num_hidden_layers")
    if facts["aux_layer_ids"] and layers:
        # vLLM captures the residual stream *before* layer i, so ids run 0..num_hidden_layers
        beyond = [i for i in facts["aux_layer_ids"] if int(i) < 0 or int(i) > int(layers)]
        if beyond:
            result.errors.append(
                f"the drafter captures target layers {beyond} but the target has {layers} layers"
            )
    _check_trained_for(result, facts, target, drafter_name, target_name)
    return result


def _check_trained_for(result: DrafterMatch, facts: dict[str, Any], target: dict[str, Any],
                       drafter_name: str | None, target_name: str | None) -> None:
    """Warn when the drafter was trained for another model (recorded, or read from its name)."""
    target_stem = model_stem(target_name or target.get("_name_or_path"))
    recorded = facts["verifier"]
    trained_for = model_stem(recorded) if recorded else model_stem(drafter_name)
    source = "its config records" if recorded else "its name says"
    if trained_for and target_stem and trained_for != target_stem:
        result.warnings.append(
            f"the drafter was trained for {trained_for} ({source}) but the target is {target_stem}:"
            " it may load yet accept far fewer tokens (a Kimi-K2 drafter on Kimi-K2.5 gave 1.13-1.24x)"
        )
    verifier_arch = facts["verifier_architectures"]
    target_arch = list(target.get("architectures") or [])
    if verifier_arch and target_arch and not set(verifier_arch) & set(target_arch):
        result.warnings.append(
            f"the drafter's verifier architecture {verifier_arch} differs from the target's {target_arch}"
        )
    result.facts["trained_for"] = trained_for
    result.facts["target_stem"] = target_stem


def require_drafter_match(
    drafter: dict[str, Any],
    target: dict[str, Any],
    *,
    drafter_name: str | None = None,
    target_name: str | None = None,
) -> DrafterMatch:
    """Raise one SpeclabError sentence when the drafter cannot work on the target; else the result."""
    result = check_drafter_match(drafter, target, drafter_name=drafter_name, target_name=target_name)
    if result.errors:
        label = drafter_name or "The drafter"
        raise SpeclabError(
            f"{label} does not fit the served model: {'; '.join(result.errors)}; use a drafter trained"
            " for this model (or train one) before spending a restart."
        )
    return result
