"""The drafter/target match check on config.json dicts shaped like the public checkpoints'."""

from __future__ import annotations

import pytest

from speclab.eagle3.match import check_drafter_match, model_stem, require_drafter_match
from speclab.errors import SpeclabError

# Field values from the public config.json files: moonshotai/Kimi-K2.5 (text_config),
# moonshotai/Kimi-K2-Instruct, deepseek-ai/DeepSeek-V3, HuggingFaceTB/SmolLM2-135M-Instruct.
KIMI_K25 = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
            "text_config": {"hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 61}}
KIMI_K2 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "vocab_size": 163840,
           "num_hidden_layers": 61}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "vocab_size": 129280,
               "num_hidden_layers": 61}
SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "vocab_size": 49152,
           "num_hidden_layers": 30}


def eagle3_head(hidden: int, vocab: int, draft_vocab: int, aux: list[int] | None = None) -> dict:
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
              "hidden_size": hidden, "vocab_size": vocab, "draft_vocab_size": draft_vocab}
    if aux:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True}
    return config


def test_a_kimi_k2_drafter_on_k25_loads_but_warns_that_it_was_trained_for_another_model() -> None:
    result = check_drafter_match(eagle3_head(7168, 163840, 32000, [1, 29, 57]), KIMI_K25,
                                 drafter_name="AQ-MedAI/Kimi-K2-Instruct-eagle3", target_name="moonshotai/Kimi-K2.5")
    assert result.ok
    assert len(result.warnings) == 1
    assert "trained for kimi-k2 (its name says)" in result.warnings[0] and "kimi-k2.5" in result.warnings[0]


def test_the_k25_drafter_on_k25_is_clean() -> None:
    result = check_drafter_match(eagle3_head(7168, 163840, 163840, [2, 30, 58]), KIMI_K25,
                                 drafter_name="lightseekorg/kimi-k2.5-eagle3", target_name="moonshotai/Kimi-K2.5")
    assert result.ok and result.warnings == []
    assert result.facts["target"]["vocab_size"] == 163840  # read from text_config


def test_a_deepseek_drafter_on_kimi_is_one_sentence_naming_both_vocabularies() -> None:
    with pytest.raises(SpeclabError) as info:
        require_drafter_match(eagle3_head(7168, 129280, 32000, [1, 29, 57]), KIMI_K25,
                              drafter_name="some/DeepSeek-V3-eagle3", target_name="moonshotai/Kimi-K2.5")
    message = info.value.message
    assert "129,280" in message and "163,840" in message
    assert message.count(".") <= 2 and "\n" not in message  # one sentence (version numbers aside)


def test_hidden_size_depth_and_architecture_mismatches_are_errors() -> None:
    small = check_drafter_match(eagle3_head(576, 49152, 49152, [2, 15, 27]), KIMI_K2)
    assert any("size 576" in e and "7168" in e for e in small.errors)
    deep = check_drafter_match(eagle3_head(576, 49152, 49152, [2, 15, 40]), SMOLLM2)
    assert deep.errors == ["the drafter captures target layers [40] but the target has 30 layers"]
    plain = check_drafter_match({"architectures": ["LlamaForCausalLM"], "hidden_size": 576,
                                 "vocab_size": 49152}, SMOLLM2)
    assert any("not an EAGLE-3 head" in e for e in plain.errors)


def test_a_speculators_checkpoint_records_its_verifier() -> None:
    drafter = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
               "transformer_layer_config": {"hidden_size": 4096, "vocab_size": 128256},
               "draft_vocab_size": 32000, "target_hidden_size": 4096,
               "speculators_config": {"verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct",
                                                   "architectures": ["LlamaForCausalLM"]}}}
    llama = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "vocab_size": 128256,
             "num_hidden_layers": 32}
    assert check_drafter_match(drafter, llama, target_name="meta-llama/Llama-3.1-8B-Instruct").warnings == []
    other = check_drafter_match(drafter, llama, target_name="meta-llama/Llama-3.3-8B-Instruct")
    assert other.ok and "its config records" in other.warnings[0]


def test_model_stem_drops_organisation_drafter_and_variant_words() -> None:
    assert model_stem("AQ-MedAI/Kimi-K2-Instruct-eagle3") == "kimi-k2"
    assert model_stem("lightseekorg/kimi-k2.5-eagle3-mla") == "kimi-k2.5"
    assert model_stem("RedHatAI/Qwen3-8B-speculator.eagle3") == "qwen3-8b"
    assert model_stem("/root/.cache/speclab/models/smollm2-135m-instruct") == "smollm2-135m"
    assert model_stem(None) is None
