"""The what-if scenario: the schema's keys, unknown keys kept, nested text_config, refusals."""

from __future__ import annotations

import pytest

from speclab.whatif.arch import from_config
from speclab.whatif.scenario import missing, scenario_from_dict
from speclab.whatif.seeds import SEEDS_SCENARIO
from speclab.whatif.step import Refusal, prepare

DSV3 = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
        "num_key_value_heads": 128, "vocab_size": 129280, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}


def scenario(**over: object) -> dict:
    base = {
        "name": "DeepSeek-V3 + MTP on 8x H200", "source": "a test",
        "model": {"name": "deepseek-ai/DeepSeek-V3", "config": DSV3, "weight_bits": 8, "an_unknown_key": [1, 2]},
        "hardware": {"gpu": "H200", "count": 8, "interconnect": "nvlink", "allreduce_bus_gb_s": None},
        "parallel": {"tensor": 8, "expert": 1, "pipeline": 1},
        "engine": {"name": "vllm", "version": "0.32.0"},
        "option": {"method": "mtp", "k": 2, "acceptance_length": 2.4, "acceptance_per_position": None,
                   "acceptance_source": "published: a test", "ngram_max_match": 4},
        "workload": {"input_tokens": 3200, "output_tokens": 800, "dataset": "x"},
        "baseline": {"metric": "output_tok_s", "values": {1: 60.0, 8: None}},
        "mode_notes": "kept, never read",
    }
    for key, value in over.items():
        base[key] = value
    return base


def test_schema_keeps_unknown_keys_and_reads_the_known_ones() -> None:
    scn = scenario_from_dict(scenario())
    assert scn.concurrencies == [1, 8]
    assert scn.baseline.step_ms(1) == pytest.approx(1000 / 60)
    assert scn.baseline.step_ms(8) is None
    assert scn.option.model_extra == {"ngram_max_match": 4}
    assert scn.model_extra == {"mode_notes": "kept, never read"}
    assert scn.acceptance_label == "published" and scn.acceptance_length() == 2.4
    assert missing(scn) is None


def test_acceptance_from_per_position_rates() -> None:
    scn = scenario_from_dict(scenario(option={"method": "eagle3", "k": 3, "acceptance_per_position": [0.8, 0.5, 0.5],
                                              "acceptance_source": "assumed: test"}))
    assert scn.acceptance_length() == pytest.approx(1 + 0.8 + 0.4 + 0.2)
    assert scn.acceptance_label == "assumed"


def test_nested_text_config_and_parameter_counts() -> None:
    arch = from_config({"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {**DSV3, "vocab_size": 163840,
                        "n_routed_experts": 384, "num_attention_heads": 64, "first_k_dense_replace": 1}})
    assert arch.total_params / 1e9 == pytest.approx(1026, abs=5)  # Kimi-K2.5: ~1T
    assert arch.active_params / 1e9 == pytest.approx(31.5, abs=1)  # ~32B active
    dsv3 = from_config(DSV3)
    assert dsv3.total_params / 1e9 == pytest.approx(671, abs=3) and dsv3.active_params / 1e9 == pytest.approx(37, abs=1)
    assert dsv3.kv_bytes_per_token == (512 + 64) * 2 and not dsv3.kv_shards_with_heads


@pytest.mark.parametrize(("change", "words"), [
    ({"option": {"method": "mtp", "k": None, "acceptance_length": 2.0}}, "option.k"),
    ({"option": {"method": "mtp", "k": 2, "acceptance_length": None}}, "does not invent acceptance"),
    ({"option": {"method": "mtp", "k": 2, "acceptance_length": 3.5}}, "above k + 1"),
    ({"engine": {"name": "slimserve", "version": "c67d"}}, "not in the mode table"),
    ({"engine": {"name": "trtllm"}, "option": {"method": "eagle3", "k": 3, "acceptance_length": 2.0}},
     "method 'eagle3' is not in the mode table"),
    ({"model": {"config": {"hidden_size": 1}}}, "num_hidden_layers"),
    ({"parallel": {"tensor": 16}}, "hardware.count is 8"),
])
def test_refusals_name_what_is_missing(change: dict, words: str) -> None:
    with pytest.raises(Refusal) as err:
        prepare(scenario_from_dict(scenario(**change)))
    assert words in err.value.message and "\n" not in err.value.message


def test_unknown_gpu_is_refused_with_the_known_ones(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    import yaml

    from speclab.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(hardware={"gpu": "H900", "count": 8, "interconnect": "nvlink"})))
    assert main(["whatif", "--scenario", str(path)]) == 1
    err = capsys.readouterr().err
    assert "The GPU 'H900' is not in speclab's GPU table; known GPUs: A100, B200, B300, H100, H200" in err
    assert "Traceback" not in err


def test_strict_version_refuses_an_unplaced_version() -> None:
    scn = scenario_from_dict(scenario(engine={"name": "vllm", "version": None}))
    assert prepare(scn).mode.unknown  # spans kept and lost by default
    with pytest.raises(Refusal, match="version not given"):
        prepare(scn, strict_version=True)


def test_the_seeds_scenario_reads() -> None:
    from speclab.whatif.scenario import load_scenario

    scn = load_scenario(SEEDS_SCENARIO)
    assert scn.concurrencies == [1, 2, 4, 8, 16, 32, 64, 128]
    assert scn.baseline.step_ms(128) == pytest.approx(1000 * 128 / 1536)
    assert scn.acceptance_label == "assumed"
