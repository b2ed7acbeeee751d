"""What a profile is cut into: ordered regex buckets for kernel/op names, vLLM step patterns,
and the parameters of an analysis."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class BucketRule(BaseModel):
    """One bucket: names that ``pattern`` finds (``re.search``) belong to it, first rule wins."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, description="bucket name shown in tables and plots")
    pattern: str = Field(..., min_length=1, description="regular expression searched in op/kernel names")
    ignore_case: bool = Field(False, description="match case-insensitively")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression ({exc})") from None
        return value

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.IGNORECASE if self.ignore_case else 0)


# Order matters: first match wins. From docs/measurement.md section 5, checked against the real CPU
# (vLLM 0.32) and H200 (torch 2.11) fixtures in tests/data/traces.
DEFAULT_BUCKETS: tuple[BucketRule, ...] = (
    BucketRule(name="communication", pattern=(
        r"nccl|NCCL|AllReduce|allreduce|all_reduce|cross_device_reduce|all_gather|allgather|AllGather"
        r"|reduce_scatter|ReduceScatter|all_to_all|alltoall|AllToAll|c10d::|shm_all|gloo")),
    BucketRule(name="moe_gemm", pattern=(
        r"fused_moe|marlin_moe|[Mm]oe.*[Gg]emm|cutlass.*[Mm]oe|topk_softmax|moe_align|moe_sum"
        r"|grouped_mm|grouped_gemm|GroupProblemShape|GroupedGemm")),
    # before attention: vLLM's CPU cache write is named _C::cpu_attn_reshape_and_cache
    BucketRule(name="cache_writes", pattern=(
        r"reshape_and_cache|concat_and_cache|kv_cache_update|store_kvcache|copy_blocks|swap_blocks")),
    BucketRule(name="attention", pattern=(
        r"flash_attn|flashinfer|FlashMLA|flash_mla|_mla_|\bmla_|_fwd_kernel|[Aa]ttention|attn"
        r"|flash_fprop|flash_fwd|sdpa|fmha|paged_attention")),
    BucketRule(name="dense_gemm", pattern=(
        r"gemm|Gemm|GEMM|cutlass|cublas|nvjet|xmma|Marlin|marlin|onednn_mm|mkldnn|sgemm"
        r"|^aten::(mm|addmm|bmm|baddbmm|matmul|linear)$")),
    BucketRule(name="sampling", pattern=(
        r"sampl|Sampl|argmax|ArgMax|topk|TopK|top_k|top_p|multinomial|gumbel|exponential_|[Ss]ort")),
    BucketRule(name="memory", pattern=r"^Memcpy|^Memset|^aten::copy_$"),
    BucketRule(name="norms_elementwise", pattern=(
        r"norm|Norm|rms|rotary|[Rr]ope|silu|gelu|act_and_mul|softmax|elementwise|Elementwise"
        r"|reduce_kernel|CatArray|gather|scatter|index|^aten::(add|sub|mul|div|neg|pow|rsqrt|exp"
        r"|mean|sum|silu|sigmoid|tanh|cat|embedding|where|lt|gt|eq|ne|div_|mul_|add_|sub_|clamp)")),
    BucketRule(name="framework", pattern=(
        r"^aten::(empty|empty_strided|new_empty|view|reshape|_reshape_alias|slice|select|as_strided"
        r"|unsqueeze|squeeze|transpose|permute|expand|t|contiguous|detach|alias|resolve_conj"
        r"|resolve_neg|item|_local_scalar_dense|lift_fresh|chunk|split|split_with_sizes|narrow"
        r"|unbind|flatten|to|_to_copy|clone|zeros|ones|full|fill_|zero_|result_type|arange)$")),
)

# vLLM's step annotations (vllm/v1/worker/gpu_worker.py): the simple form, and the
# detailed form written when profiler_config.detailed_trace_annotation is on.
VLLM_STEP_PATTERNS: tuple[str, ...] = (
    r"^execute_context_(?P<ctx_reqs>\d+)\((?P<ctx_tokens>\d+)\)"
    r"_generation_(?P<gen_reqs>\d+)\((?P<gen_tokens>\d+)\)$",
    r"^execute_(?P<total_tokens>\d+)_context_(?P<ctx_reqs>\d+)\(sq(?P<ctx_tokens>\d+)sk\d+sqsq\d+sqsk\d+\)"
    r"_generation_(?P<gen_reqs>\d+)\(sq(?P<gen_tokens>\d+)sk\d+sqsq\d+sqsk\d+\)$",
)

StepKind = Literal["prefill", "decode", "mixed", "idle", "step"]


class ProfileParams(BaseModel):
    """How a trace is read and bucketed: the fields a params file or notebook sets."""

    model_config = ConfigDict(extra="forbid")

    buckets: list[BucketRule] = Field(
        default_factory=lambda: [r.model_copy() for r in DEFAULT_BUCKETS],
        description="ordered bucket rules; the first rule whose pattern matches a name wins")
    other_bucket: str = Field("other", description="bucket of names no rule matches (always listed)")
    communication_bucket: str = Field("communication", description="bucket counted as communication for overlap")
    source: Literal["auto", "kernel", "cpu_op"] = Field(
        "auto", description="auto: GPU kernels when the trace has any, else CPU ops by self time")
    step_patterns: list[str] = Field(
        default_factory=lambda: list(VLLM_STEP_PATTERNS),
        description="regexes naming engine-step annotations (named groups ctx_reqs, ctx_tokens, gen_reqs, gen_tokens)")
    step_window: Literal["until_next", "annotation"] = Field(
        "until_next",
        description="until_next: a step owns everything from its start to the next step's start "
                    "(vLLM samples outside the annotation); annotation: only inside it")
    scaling_kinds: list[str] = Field(
        default_factory=lambda: ["decode"], description="step kinds fitted in the scaling table")
    include_frontend: bool = Field(False, description="also read vLLM's API-server trace (*.async_llm.*)")
    backend: Literal["scan", "ijson"] = Field("scan", description="JSON reader: speclab's scanner or ijson")
    workers: int = Field(1, ge=1, le=64, description="processes reading rank files at once")

    @field_validator("step_patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"step pattern {pattern!r} is not a valid regular expression ({exc})") from None
        return value

    @model_validator(mode="after")
    def _unique(self) -> ProfileParams:
        names = [r.name for r in self.buckets]
        if self.other_bucket in names:
            raise ValueError(f"other_bucket {self.other_bucket!r} is also a rule name; rename one")
        return self

    def bucket_names(self) -> list[str]:
        """Bucket names in rule order (repeated names once), then the unmatched bucket."""
        seen: list[str] = []
        for rule in self.buckets:
            if rule.name not in seen:
                seen.append(rule.name)
        return [*seen, self.other_bucket]


