"""Generated command lines, checked against the engines' real flag names (docs/measurement.md sections 2, 5, 6)."""

import json

import pytest
from pydantic import ValidationError

from speclab.errors import SpeclabError
from speclab.options import SpecOption
from speclab.serve.launch import ServerLaunch


def flag_value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_vllm_cpu_module_launch_baseline() -> None:
    launch = ServerLaunch(model="/m", python="/venv/bin/python", served_model_name="s", port=8123,
                          dtype="bfloat16", max_model_len=2048, enforce_eager=True)
    cmd = launch.command()
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag_value(cmd, "--model") == "/m"
    assert flag_value(cmd, "--port") == "8123"
    assert flag_value(cmd, "--host") == "127.0.0.1"
    assert flag_value(cmd, "--max-model-len") == "2048"
    assert "--enforce-eager" in cmd
    assert "--speculative-config" not in cmd


def test_vllm_serve_cli_ngram() -> None:
    option = SpecOption(method="ngram", num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4)
    cmd = ServerLaunch(model="moonshotai/Kimi-K2.5", option=option, tensor_parallel_size=8).command()
    assert cmd[:3] == ["vllm", "serve", "moonshotai/Kimi-K2.5"]
    assert flag_value(cmd, "--tensor-parallel-size") == "8"
    assert json.loads(flag_value(cmd, "--speculative-config")) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4,
    }


def test_vllm_suffix_eagle3_draft_model_and_profiler() -> None:
    suffix = ServerLaunch(model="/m", option=SpecOption(method="suffix", num_speculative_tokens=8))
    assert json.loads(flag_value(suffix.command(), "--speculative-config")) == {
        "method": "suffix", "num_speculative_tokens": 8}
    eagle = ServerLaunch(model="/m", option=SpecOption(method="eagle3", model="/head", num_speculative_tokens=3),
                         profiler_dir="/abs/prof")
    cmd = eagle.command()
    assert json.loads(flag_value(cmd, "--speculative-config")) == {
        "method": "eagle3", "model": "/head", "num_speculative_tokens": 3}
    profiler = json.loads(flag_value(cmd, "--profiler-config"))
    assert profiler["profiler"] == "torch" and profiler["torch_profiler_dir"] == "/abs/prof"
    draft = ServerLaunch(model="/m", option=SpecOption(method="draft_model", model="/small", num_speculative_tokens=5))
    assert json.loads(flag_value(draft.command(), "--speculative-config"))["method"] == "draft_model"


def test_extra_flags_and_env_pass_through() -> None:
    launch = ServerLaunch(model="/m", extra_args=["--gpu-memory-utilization", "0.9"], env={"A": "1"})
    assert launch.command()[-2:] == ["--gpu-memory-utilization", "0.9"]
    assert launch.environment() == {"A": "1"}
    assert launch.command_line().startswith("A=1 vllm serve /m")


def test_sglang_eagle3_sets_steps_topk_and_draft_tokens_together() -> None:
    launch = ServerLaunch(engine="sglang", model="/kimi", python="python3", tensor_parallel_size=8,
                          option=SpecOption(method="eagle3", model="/drafter", num_speculative_tokens=3),
                          profiler_dir="/prof")
    cmd = launch.command()
    assert cmd[:3] == ["python3", "-m", "sglang.launch_server"]
    assert flag_value(cmd, "--model-path") == "/kimi"
    assert flag_value(cmd, "--tp-size") == "8"
    assert flag_value(cmd, "--speculative-algorithm") == "EAGLE3"
    assert flag_value(cmd, "--speculative-draft-model-path") == "/drafter"
    # the Kimi-K2.5 recipe: steps 3, topk 1, draft tokens 4 (sglang#19689)
    assert flag_value(cmd, "--speculative-num-steps") == "3"
    assert flag_value(cmd, "--speculative-eagle-topk") == "1"
    assert flag_value(cmd, "--speculative-num-draft-tokens") == "4"
    assert "--enable-metrics" in cmd
    assert launch.environment()["SGLANG_TORCH_PROFILER_DIR"] == "/prof"


def test_sglang_ngram_and_draft_model() -> None:
    cmd = ServerLaunch(engine="sglang", model="/m", option=SpecOption(
        method="ngram", num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4)).command()
    assert flag_value(cmd, "--speculative-algorithm") == "NGRAM"
    assert flag_value(cmd, "--speculative-num-draft-tokens") == "4"
    assert flag_value(cmd, "--speculative-ngram-min-match-window-size") == "2"
    assert flag_value(cmd, "--speculative-ngram-max-match-window-size") == "4"
    cmd = ServerLaunch(engine="sglang", model="/m", option=SpecOption(
        method="draft_model", model="/small", num_speculative_tokens=4)).command()
    assert flag_value(cmd, "--speculative-algorithm") == "STANDALONE"


def test_sglang_suffix_is_refused_clearly() -> None:
    with pytest.raises(SpeclabError, match="no suffix decoding"):
        ServerLaunch(engine="sglang", model="/m", option=SpecOption(method="suffix")).command()


def test_a_drafter_launch_needs_its_model() -> None:
    SpecOption(method="eagle3")  # fine as a declaration of what an external server runs
    with pytest.raises(ValidationError, match="needs 'model'"):
        ServerLaunch(model="/m", option=SpecOption(method="eagle3"))


@pytest.mark.parametrize("bad", [
    {"method": "baseline", "num_speculative_tokens": 3},
    {"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2},
    {"method": "medusa2"},
])
def test_bad_options_are_rejected(bad: dict) -> None:
    with pytest.raises(ValidationError):
        SpecOption(**bad)


def test_auto_dtype_takes_bf16_only_where_the_cpu_has_it_natively() -> None:
    from speclab.serve.embedded import cpu_has_native_bf16

    amd_avx2 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma f16c\n"
    intel_avx512 = "processor\t: 0\nflags\t\t: fpu sse avx avx2 avx512f avx512dq avx512_bf16 amx_bf16\n"
    assert not cpu_has_native_bf16(amd_avx2)
    assert cpu_has_native_bf16(intel_avx512)
    assert not cpu_has_native_bf16("flags\t\t: avx512fp16_not_a_flag avx2\n")
