"""A deployment's decode step in parts, priced from the config, the GPU table and the option.

A step of ``B`` sequences verifying ``n`` tokens each (``n = 1`` is a decode step) costs, per
GPU (docs/whatif.md, section 2):

* **weights**: the non-expert weights read once (attention, linear attention, dense FFNs,
  shared experts, LM head), at the GPU's bandwidth times an achieved share;
* **experts**: the routed experts the step's tokens reach, ``E (1 - (1 - K/E)^t)`` per layer
  with ``t = B (1 + (n - 1) s)`` (``s`` < 1 when a sequence's draft tokens share experts),
  each read once plus a per-expert kernel cost on which two H200 harnesses disagree;
* **kv**: each sequence's cache read once; draft tokens re-read a share of it (0 for a kernel
  that reads the cache once per sequence, 0.45 for speclab's Triton MLA kernel on the H200);
  linear-attention state read and written per token;
* **compute**: what the GEMMs and attention need beyond the memory time (roofline per kind);
* **communication**: two all-reduces a layer under tensor parallelism (or two all-to-alls a MoE
  layer under DP attention), from the interconnect table;
* **fixed**: what the step costs beyond its parts (launches, scheduler), *fitted* so that the
  modelled baseline step matches the published one where given, *assumed* where not;
* with speculation: the **drafter**'s passes (an MTP layer, an EAGLE head, a block drafter:
  the same parts, plus a per-pass overhead) and **speculative mode's own cost**
  (:mod:`speclab.predict.modecost`).

Every uncertain input is an :class:`Input` with a ``[low, high]`` range, a label and a source;
:func:`step_times` evaluates arrays of input values at once (the interval's draws, the
sensitivity's grids).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from speclab.errors import SpeclabError
from speclab.predict.modecost import ENGINES, ModeCost, mode_cost_parts, normalise_method
from speclab.whatif import hardware as hw
from speclab.whatif.arch import Architecture, from_config
from speclab.whatif.scenario import Scenario, missing

__all__ = ["CHAIN_METHODS", "Deployment", "Input", "Refusal", "StepTimes", "prepare", "step_times"]

Label = Literal["measured", "fitted", "borrowed", "assumed"]

CHAIN_METHODS = ("eagle", "eagle3", "mtp", "draft_model")
# How far an acceptance length may be from the figure given, by how it is known (assumed): a
# figure measured on the deployment's own traffic moves by run-to-run noise; a published one by
# rounding and the run it came from; an assumed one, borrowed from another checkpoint or dataset,
# by as much as datasets move it (EAGLE-3 on Kimi-K2.5: 2.69 MT-Bench to 3.29 HumanEval; DSpark
# 2.91 on V4-Flash to ~3.4 on V4-Pro).
ACCEPTANCE_SPREAD = {"measured": 0.03, "published": 0.05, "assumed": 0.20}
BLOCK_METHODS = ("dspark", "dflash")
CPU_METHODS = ("ngram", "suffix", "ngram_gpu")

# The two H200 harnesses (issue 34): benchmarks/gpu_step.py's TP-8 Kimi rank pays 4.1 us per
# distinct expert and layer (0.245 ms over 60 layers) for an 11 MB bf16 expert slice that takes
# 2.65 us to read at the 4.15 TB/s measured on that machine, plus ~93 us fixed per layer (5.56 ms
# over 60; 72-98 us across its shapes); an independent H200 measurement of the same MoE shapes
# pays ~17-19 us per extra expert and layer with no fixed cost. As kernel cost beyond the bytes:
# 1.45 us (gpu_step.py) vs ~15.4 us (held-out). Neither is vLLM's fused-MoE kernel, which reads
# every expert in one launch: its floor is the bytes alone (0 beyond them, 0 fixed), the low
# end of both ranges.
HARNESS_EXCESS_US = {"benchmarks/gpu_step.py (H200)": 1.45, "held-out H200 harness": 15.4}
# Shown wrong for serving engines by published baselines: a deployment's published decode step
# bounds what its MoE kernel can pay per expert. Every published baseline of the development set
# able to rule on it (Qwen3.5-397B on 4 RTX PRO 6000, Kimi-K2.5 on 8 B200, DeepSeek-V4-Flash on
# 8 MI355X, Qwen3.8 under PP4, the seeds' Kimi-K2.5 on 8 PCIe GPUs) rules the held-out harness's
# 15.4 us out; the development set's together allow at most ~1.8 us (the seeds' own baseline 0.6;
# docs/whatif.md, section 3; tests/unit/whatif/test_predict.py recomputes it). 2 us is the range's
# top, so gpu_step.py's 1.45 us stays inside it; each deployment's own baseline narrows it further.
MOE_EXCESS_FROM_BASELINES_US = 2.0
HARNESS_FIXED_US = {"benchmarks/gpu_step.py (H200)": 85.0, "held-out H200 harness": 0.0}
_HARNESS_SOURCE = ("two H200 harnesses disagree (issue 34): benchmarks/gpu_step.py pays ~4 us an expert and layer "
                   "(1.45 us beyond its bytes) plus 72-98 us fixed a layer; a held-out harness pays ~17-19 us an extra "
                   "expert and layer (15.4 beyond its bytes), no fixed cost; the published baselines of the development "
                   "set allow at most ~2 us (the held-out figure shown wrong for serving engines, docs/whatif.md "
                   "section 3); a fused-MoE kernel's floor is the bytes alone (0); carried to other GPUs unchanged "
                   "(assumed)")


# The drafter's own overhead a pass, from SpecDecode-Bench's fitted step model (SpecDecode-Bench/simulator,
# predictor.py, class Llama8BH100: vLLM 0.10.1, Llama-3.1-8B-Instruct, one H100): a speculative step's
# EAGLE draft phase costs draft_c_fixed = 2.135 ms (three passes, the study's k = 3; the per-token and
# per-context terms are negligible at batch 1). Its overhead_constant_per_step (1.21 ms) is added to
# every step of both arms (simulator.py, simulate_org_batch and simulate_sd_batch): it is not
# speculation's. Less the passes' own reads (the EAGLE layer and the shared 128k LM head at 70-90 % of
# the H100's bandwidth, what this module prices), the overhead is 0.08-0.22 ms a pass
# (:func:`draft_pass_overhead_ms`); carried to other drafters, engines and GPUs unchanged (assumed).
SPECDECODE_BENCH_DRAFT_MS = 2.13526175
SPECDECODE_BENCH_PASSES = 3
SPECDECODE_BENCH_LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
                             "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                             "vocab_size": 128256}
_DRAFT_PASS_SOURCE = ("0.08-0.22 ms a drafter pass beyond its reads: SpecDecode-Bench's fitted EAGLE draft phase, 2.135 "
                      "ms for three passes (Llama-3.1-8B, H100, vLLM 0.10.1; SpecDecode-Bench/simulator predictor.py), "
                      "less the passes' own reads at 70-90 % of the H100's bandwidth; its 1.21 ms per-step overhead is "
                      "paid by both arms (simulator.py), so not here; carried to other drafters and GPUs (assumed)")


def draft_pass_overhead_ms() -> tuple[float, float]:
    """The drafter's own overhead a pass (ms), ``(low, high)``: SpecDecode-Bench's fitted draft phase a
    pass less that pass's weight reads (one EAGLE layer of Llama-3.1-8B and its LM head, 16 bits) at 70 %
    (low) and 90 % (high) of the H100's bandwidth."""
    llama = from_config(SPECDECODE_BENCH_LLAMA_8B, "Llama-3.1-8B")
    head = llama.one_layer(moe=False, ffn_params=llama.dense_ffn_params)
    read = (head.attn_params + head.dense_ffn_params + head.lm_head_params) * 2.0 / (hw.gpu("H100").hbm_tb_s * 1e12)
    per_pass = SPECDECODE_BENCH_DRAFT_MS / SPECDECODE_BENCH_PASSES
    return per_pass - read / 0.70 * 1e3, per_pass - read / 0.90 * 1e3


class Refusal(SpeclabError):
    """A scenario the what-if cannot predict; the message names what is missing in one sentence."""


@dataclass(frozen=True)
class Input:
    """One borrowed or assumed input: its range, label and source.

    ``sources``: where two sources give different values (the interval spans both)."""

    name: str
    what: str
    unit: str
    low: float
    high: float
    label: Label
    source: str
    search: tuple[float, float] = (0.0, 1.0)
    sources: Mapping[str, float] = field(default_factory=dict)
    fmt: str = "{:.3g}"
    group: str = ""  # inputs of one group are drawn together (an engine's implementation, a machine)
    worse: Literal["high", "low"] = "high"  # which end of the range makes the step slower
    spec_only: bool = False  # moves only the speculative step (the published baseline cannot rule on it)
    given: float | None = None  # the figure the scenario gives, where the range is drawn around one

    @property
    def centre(self) -> float:
        return self.given if self.given is not None else self.mid

    @property
    def mid(self) -> float:
        return (self.low + self.high) / 2

    def show(self, value: float) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return self.fmt.format(value) + unit


@dataclass
class Deployment:
    """A scenario made ready to price: shapes, hardware, mode cost, inputs, anchors."""

    scenario: Scenario
    arch: Architecture
    gpu: hw.GPU
    link: hw.Interconnect | None
    method: str
    k: int
    verify_tokens: int
    passes: int | None  # drafter passes a step (None: the tree_passes input)
    tokens_per_pass: float
    drafter: Architecture | None
    mode: ModeCost
    inputs: list[Input]
    anchors: dict[int, float]  # concurrency -> published baseline step (ms)
    notes: list[str] = field(default_factory=list)

    def input(self, name: str) -> Input:
        for item in self.inputs:
            if item.name == name:
                return item
        raise KeyError(name)

    def mids(self) -> dict[str, float]:
        return {i.name: i.mid for i in self.inputs}


def _bytes(bits: Any) -> Any:
    bits = np.asarray(bits, float)
    return bits / 8.0 * np.where(bits < 8, 1.125, 1.0)  # 4-bit groups carry a scale (g32 bf16, NVFP4 fp8/16)


def prepare(scenario: Scenario, *, strict_version: bool = False) -> Deployment:
    """Check what the scenario gives, resolve its hardware and mode, and list its inputs.

    Raises :class:`Refusal` with one sentence where it cannot be predicted."""
    engine = (scenario.engine.name or "").strip().lower()
    if engine and engine not in ENGINES:
        raise Refusal(f"The engine {scenario.engine.name!r} is not in the mode table ({', '.join(ENGINES)}), so "
                      "speculative mode's own cost on it is unknown.")
    reason = missing(scenario)
    if reason:
        raise Refusal(reason)
    opt, par, hwin = scenario.option, scenario.parallel, scenario.hardware
    assert opt.method is not None and opt.k is not None and scenario.engine.name is not None
    method = normalise_method(opt.method)
    overlap = scenario.engine.overlap
    try:
        arch: Architecture | None = from_config(scenario.model.config, scenario.model.name or scenario.name)
        arch_error = None
    except SpeclabError as exc:
        arch, arch_error = None, exc.message
    mode = mode_cost_parts(scenario.engine.name, scenario.engine.version, method,
                           per_batch_schedule=opt.per_batch_schedule, pipeline_parallel=par.pipeline,
                           baseline_overlap=overlap.baseline if overlap else None,
                           option_overlap=overlap.option if overlap else None, residual=True,
                           linear_attention_layers=arch.linear_layers if arch else 0)
    if mode.refusal:
        raise Refusal(mode.refusal)
    if mode.unknown and strict_version:
        raise Refusal(mode.unknown[0] + " (--strict-version refuses; without it the interval spans both.)")
    if method == "draft_model" and not isinstance(opt.model_extra or {}, dict):
        raise Refusal("option.draft_config (the draft model's config.json) is not given.")
    if method == "draft_model" and not (opt.model_extra or {}).get("draft_config"):
        raise Refusal("option.draft_config (the draft model's config.json) is not given, so its passes cannot be priced.")
    if method not in CHAIN_METHODS + BLOCK_METHODS + CPU_METHODS:
        raise Refusal(f"The method {opt.method!r} has no step model (known: "
                      f"{', '.join(CHAIN_METHODS + BLOCK_METHODS + CPU_METHODS)}).")
    try:
        device = hw.gpu(str(hwin.gpu))
    except SpeclabError as exc:
        raise Refusal(exc.message) from None
    gpus_needed = par.tensor * par.pipeline
    if gpus_needed > hwin.count:
        raise Refusal(f"parallel needs {gpus_needed} GPUs (tensor {par.tensor} x pipeline {par.pipeline}); "
                      f"hardware.count is {hwin.count}.")
    link = None
    collective = par.tensor > 1 or par.pipeline > 1
    if collective:
        name = "infiniband" if hwin.count > 8 and par.tensor > 8 else str(hwin.interconnect)
        try:
            link = hw.interconnect(name, device)
        except SpeclabError as exc:
            raise Refusal(exc.message) from None
    if arch is None:
        raise Refusal(str(arch_error))

    k = int(opt.k)
    verify = k + 1
    notes = list(arch.notes)
    drafter: Architecture | None = None
    passes: int | None
    per_pass = 1.0
    if method in CPU_METHODS:
        passes = 0
    elif method in BLOCK_METHODS:
        passes, per_pass = 1, float(k)
        if method == "dspark" and arch.dspark_stages:
            # a checkpoint's own DSpark drafter (DeepSeek-V4): a stack of MTP-style stages of the target's
            # layer shape, routed experts included, one per captured target layer
            drafter = arch.one_layer(layers=arch.dspark_stages)
            notes.append(f"dspark: one drafter pass drafts the block of {k} through the checkpoint's "
                         f"{arch.dspark_stages} stages (one per dspark_target_layer_ids entry), each a layer of the "
                         "target's shape with its routed experts, and one LM head (sgl-project/sglang#29538: 'a "
                         "3-stage MTP stack'; vllm-project/vllm#56797: '3 stages'; xLLM-AI/xllm#2172: three stages "
                         "with MoE across EP ranks)")
        else:
            drafter = arch.one_layer(moe=False, ffn_params=arch.dense_ffn_params or 12.0 * arch.hidden ** 2)
            notes.append(f"{method}: one drafter pass drafts the block of {k} (a dense layer of the target's width and "
                         "its LM head, assumed)")
    else:
        passes = int(opt.draft_passes) if opt.draft_passes else (None if opt.tree else k)
        if opt.tree:
            per_pass = float(k)  # the tree's tokens, spread over the passes (tokens_per_pass set per draw)
        if method == "mtp":
            drafter = arch.one_layer()
            notes.append("MTP: each pass runs one decoder layer of the target's shape and the full LM head")
        elif method == "eagle3":
            ffn = arch.dense_ffn_params or 12.0 * arch.hidden ** 2
            drafter = arch.one_layer(moe=False, ffn_params=ffn + 3.0 * arch.hidden ** 2, vocab=32000)
            notes.append("EAGLE-3: a dense layer (the target's dense FFN width, else 4x hidden, assumed) plus its "
                         "3-layer fusion, a 32k draft vocabulary")
        elif method == "eagle":
            drafter = arch.one_layer(moe=False, ffn_params=arch.dense_ffn_params or 12.0 * arch.hidden ** 2)
        else:
            draft_cfg = (opt.model_extra or {})["draft_config"]
            drafter = from_config(draft_cfg, "draft model")
    anchors: dict[int, float] = {}
    for c in scenario.concurrencies:
        step = scenario.baseline.step_ms(c, scenario.workload.output_tokens)
        if step is not None:
            anchors[c] = step
    inputs = _inputs(scenario, arch, device, link, method, passes, mode, anchors)
    if mode.unknown:
        notes += mode.unknown
    return Deployment(scenario, arch, device, link, method, k, verify, passes, per_pass, drafter, mode, inputs,
                      anchors, notes)


def _inputs(scn: Scenario, arch: Architecture, device: hw.GPU, link: hw.Interconnect | None, method: str,
            passes: int | None, mode: ModeCost, anchors: Mapping[int, float]) -> list[Input]:
    out = [
        Input("hbm_efficiency", "the share of the GPU's memory bandwidth a step achieves", "", 0.70, 0.90, "assumed",
              f"{device.name}: {device.hbm_tb_s:g} TB/s ({device.source}); 70-90 % achieved (assumed; speclab's H200 "
              "copied at 86 % of its 4.8 TB/s)", (0.2, 1.0), fmt="{:.0%}", group="machine", worse="low"),
        Input("compute_efficiency", "the share of peak FLOP/s a GEMM achieves", "", 0.35, 0.70, "assumed",
              "35-70 % of the dense peak (assumed)", (0.05, 1.0), fmt="{:.0%}", group="machine", worse="low"),
    ]
    mb = scn.model
    wbits = mb.weight_bits
    if wbits is None:
        out.append(Input("weight_bits", "the weights' bits as served", "bits", 8, 16, "assumed",
                         "model.weight_bits not given: 8-16 bits (assumed)", (4, 16), fmt="{:.0f}"))
    if mb.dense_weight_bits is None and (wbits is None or wbits < 16):
        low = float(wbits) if wbits is not None else 8.0
        out.append(Input("dense_weight_bits", "the non-expert weights' bits", "bits", low, 16.0, "assumed",
                         f"non-expert weights between the experts' {low:g} bits and 16 (assumed; checkpoints differ)",
                         (4, 16), fmt="{:.0f}"))
    wl = scn.workload
    if wl.input_tokens is None or wl.output_tokens is None:
        lo_in, hi_in = (wl.input_tokens, wl.input_tokens) if wl.input_tokens is not None else (256, 4096)
        lo_out, hi_out = (wl.output_tokens, wl.output_tokens) if wl.output_tokens is not None else (128, 2048)
        out.append(Input("context_tokens", "the context each sequence decodes at", "tokens",
                         lo_in + lo_out / 2, hi_in + hi_out / 2, "assumed",
                         "workload lengths not given: input " + (f"{wl.input_tokens}" if wl.input_tokens is not None
                                                                 else "256-4096") + ", output "
                         + (f"{wl.output_tokens}" if wl.output_tokens is not None else "128-2048")
                         + " (assumed), at half the output on average", (16, 262144), fmt="{:.0f}"))
    if arch.is_moe:
        out.append(Input("moe_expert_us", "the MoE kernel's cost per distinct expert and layer beyond its bytes", "us",
                         0.0, MOE_EXCESS_FROM_BASELINES_US, "borrowed", _HARNESS_SOURCE, (0.0, 60.0),
                         sources=dict(HARNESS_EXCESS_US), fmt="{:.1f}", group="engine"))
        out.append(Input("moe_layer_fixed_us", "the MoE kernel's fixed cost a layer", "us", 0.0, 98.0, "borrowed",
                         "0 (the held-out harness; a fused kernel) to 72-98 us a layer (benchmarks/gpu_step.py, H200)",
                         (0.0, 2000.0), sources=dict(HARNESS_FIXED_US), fmt="{:.0f}", group="engine"))
        out.append(Input("routing_spread", "the routing spread of a sequence's draft tokens (1: independent)", "",
                         0.5, 1.0, "borrowed", "1: independent routing (an upper bound); 0.5: verifying 4 adjacent "
                         "tokens loads ~2.5x the experts of one, not 4x (Cohere blog, 21 Apr 2026; docs/moe.md "
                         "section 1)", (0.0, 1.0), fmt="{:.2f}", spec_only=True))
    out.append(Input("kv_draft_factor", "the share of its cache a draft token re-reads", "", 0.0, 0.45, "fitted",
                     "0: a kernel reading each cache once per sequence; 0.45: speclab's Triton MLA kernel on the H200 "
                     "(16-row blocks; docs/moe.md section 7); 0.08 for its GQA kernel", (0.0, 3.0), fmt="{:.2f}",
                     group="engine", spec_only=True))
    if link is not None:
        given = scn.hardware.allreduce_bus_gb_s
        bus = (given, given) if given else link.bus_gb_s
        out.append(Input("allreduce_bus_gb_s", "the all-reduce bus bandwidth", "GB/s", bus[0], bus[1],
                         "assumed" if given else "borrowed",
                         f"{link.name}: " + ("hardware.allreduce_bus_gb_s as given" if given else link.source),
                         (bus[0] / 20, bus[1] * 20), fmt="{:.1f}", group="machine", worse="low"))
        out.append(Input("allreduce_latency_us", "the all-reduce latency at small messages", "us", link.alpha_us[0],
                         link.alpha_us[1], "borrowed", f"{link.name}: {link.source}",
                         (0.5, link.alpha_us[1] * 20), fmt="{:.1f}", group="machine"))
    if passes is None or passes > 0:
        lo_pass, hi_pass = (round(x, 2) for x in draft_pass_overhead_ms())
        out.append(Input("draft_pass_ms", "the drafter's own overhead a pass (launches, sampling, sync)", "ms",
                         lo_pass, hi_pass, "borrowed", _DRAFT_PASS_SOURCE, (0.0, 20.0),
                         fmt="{:.2f}", group="engine", spec_only=True))
    if passes is None:
        out.append(Input("tree_passes", "the tree drafter's passes a step", "", 3, 6, "assumed",
                         "the tree's depth is not given: 3-6 passes (assumed)", (1, 24), fmt="{:.1f}", spec_only=True))
    if not anchors:
        lo = arch.layers * 8e-3 + 0.2
        hi = arch.layers * 25e-3 + 1.0
        out.append(Input("fixed_ms", "the step's fixed cost (launches, scheduler)", "ms", lo, hi, "assumed",
                         "no published baseline to fit it: 8-25 us a layer plus 0.2-1 ms a step (assumed)",
                         (0.0, hi * 20), fmt="{:.2f}"))
    labels = {p.label for p in mode.parts}
    srcs = "; ".join(f"{p.name}: {p.source}" for p in mode.parts) or "none in the mode table for this option"
    out.append(Input("mode_share", "speculative mode's own cost (0 = the table's low end, 1 = its high end)", "",
                     0.0, 1.0, "assumed" if "assumed" in labels else "borrowed", srcs, (-5.0, 50.0), fmt="{:.2f}",
                     group="engine", spec_only=True))
    al = scn.acceptance_length()
    assert al is not None
    label = scn.acceptance_label
    rng = scn.option.acceptance_length_range
    if rng and len(rng) == 2:
        lo_al, hi_al = float(rng[0]), float(rng[1])
    else:
        spread = ACCEPTANCE_SPREAD[label]
        lo_al, hi_al = al * (1 - spread), al * (1 + spread)
    cap = scn.option.k + 1 if scn.option.k and not scn.option.tree else math.inf
    lo_al, hi_al = max(1.0, lo_al), min(cap, hi_al)
    said = scn.option.acceptance_source or "not said"
    out.append(Input("acceptance_length", "the acceptance length", "tokens", lo_al, hi_al,
                     "measured" if label == "measured" else ("borrowed" if label == "published" else "assumed"),
                     (said if said.lower().startswith(label) else f"{label}: {said}")
                     + f"; {al:.2f}, range {lo_al:.2f}-{hi_al:.2f}"
                     + (" (the scenario's range)" if rng else f" (+-{ACCEPTANCE_SPREAD[label]:.0%}, {label})"),
                     (1.0, float(scn.option.k + 1) if scn.option.k else 20.0), fmt="{:.2f}", spec_only=True,
                     given=min(max(al, lo_al), hi_al)))
    return out


@dataclass
class StepTimes:
    """Per-GPU times (ms) of one concurrency, arrays over the values evaluated."""

    baseline_parts: dict[str, np.ndarray]
    spec_parts: dict[str, np.ndarray]
    baseline_ms: np.ndarray
    spec_ms: np.ndarray
    speedup: np.ndarray
    fixed_ms: np.ndarray
    consistent: np.ndarray  # the parts do not exceed the published baseline at any anchor


def _forward(dep: Deployment, arch: Architecture, v: Mapping[str, Any], batch: float, n: Any, ctx: Any,
             *, drafter: bool = False) -> dict[str, Any]:
    """One forward pass's parts (ms per GPU): ``batch`` sequences of ``n`` tokens each."""
    scn = dep.scenario
    par = scn.parallel
    tp, ep, dp = par.tensor, par.expert, par.attention_data_parallel
    attn_tp = max(tp // dp, 1)
    moe_tp = max(tp // ep, 1) if ep > 1 else tp
    n = np.asarray(n, float)
    tokens = batch * n
    bw = dep.gpu.hbm_tb_s * 1e12 * np.asarray(v["hbm_efficiency"], float)
    wbits = np.asarray(v.get("weight_bits", scn.model.weight_bits or 16), float)
    dbits = np.asarray(v.get("dense_weight_bits", scn.model.dense_weight_bits or scn.model.weight_bits or 16), float)
    if drafter:
        dbits = np.asarray(16.0)  # drafters are usually served at 16 bits
        wbits = np.where(wbits < 8, 8.0, wbits) if arch.is_moe else wbits
    eff = np.asarray(v["compute_efficiency"], float)
    peak_w = np.where(wbits <= 8, dep.gpu.peak_tflops(8), dep.gpu.peak_tflops(16)) * 1e12 * eff
    peak_a = dep.gpu.peak_tflops(16) * 1e12 * eff

    attn_w = (arch.attn_layers * arch.attn_params + arch.linear_layers * arch.linear_params) / attn_tp
    rest_w = (arch.dense_ffn_layers * arch.dense_ffn_params + arch.moe_layers * arch.shared_params
              + arch.lm_head_params) / tp
    dense_mem = (attn_w + rest_w) * _bytes(dbits) / bw
    dense_comp = 2.0 * tokens * arch.dense_params / tp / peak_w
    out: dict[str, Any] = {"weights": dense_mem * 1e3}
    compute = np.maximum(dense_comp - dense_mem, 0.0)

    experts = np.zeros_like(dense_mem)
    if arch.is_moe:
        spread = np.asarray(v.get("routing_spread", 1.0), float)
        routed = batch * (1.0 + (n - 1.0) * spread)
        frac = 1.0 - (1.0 - arch.top_k / arch.experts) ** routed
        local = arch.experts / ep * frac
        per_layer = local * arch.expert_params / moe_tp * _bytes(wbits) / bw
        mem = arch.moe_layers * per_layer
        x = np.asarray(v.get("moe_expert_us", 0.0), float)
        fixed_us = np.asarray(v.get("moe_layer_fixed_us", 0.0), float)
        kernel = arch.moe_layers * (local * x + fixed_us) * 1e-6
        comp = 2.0 * tokens * arch.top_k * arch.expert_params * arch.moe_layers / tp / peak_w
        experts = mem + kernel
        compute = compute + np.maximum(comp - mem, 0.0)
    out["experts"] = experts * 1e3

    kv_bits = float(scn.model.kv_cache_bits or 16)
    read = np.minimum(ctx, arch.sparse_attention_tokens) if arch.sparse_attention_tokens else np.asarray(ctx, float)
    kv_div = dp * (min(attn_tp, arch.kv_heads) if arch.kv_shards_with_heads else 1)
    q = np.asarray(v.get("kv_draft_factor", 0.0), float)
    reread = 1.0 + q * (n - 1.0)
    kv = batch * arch.attn_layers * (read * arch.kv_bytes_per_token * kv_bits / 16
                                     + np.asarray(ctx, float) * arch.indexer_bytes_per_token) / kv_div * reread
    lin = batch * arch.linear_layers * arch.linear_state_bytes / attn_tp * (1.0 + n)
    kv_t = (kv + lin) / bw
    attn_comp = tokens * read * arch.attn_flops_per_context_token * arch.attn_layers / tp / peak_a
    out["kv"] = kv_t * 1e3
    compute = compute + np.maximum(attn_comp - kv_t, 0.0)
    out["compute"] = compute * 1e3

    comm = np.zeros_like(dense_mem)
    link = dep.link
    if link is not None:
        alpha = v["allreduce_latency_us"]
        bus = v["allreduce_bus_gb_s"]
        if dp > 1:
            # DP attention + expert parallel: a dispatch and a combine a MoE layer (fp8 out, bf16 back)
            per_rank = tokens / dp * arch.top_k * arch.hidden * 1.5
            comm = arch.moe_layers * 2 * (np.asarray(alpha, float) + per_rank / (np.asarray(bus, float) * 1e9) * 1e6)
        elif tp > 1:
            msg = tokens * arch.hidden * 2.0
            comm = 2 * arch.layers * hw.allreduce_us(link, msg, tp, alpha, bus)
        if par.pipeline > 1:
            msg = tokens * arch.hidden * 2.0
            comm = comm + (par.pipeline - 1) * (np.asarray(alpha, float) + msg / (np.asarray(bus, float) * 1e9) * 1e6)
    out["communication"] = np.asarray(comm, float) * 1e-3
    return out


def _context(dep: Deployment, v: Mapping[str, Any]) -> Any:
    if "context_tokens" in v:
        return np.asarray(v["context_tokens"], float)
    wl = dep.scenario.workload
    return float((wl.input_tokens or 0) + (wl.output_tokens or 0) / 2)


def _drafter_ms(dep: Deployment, v: Mapping[str, Any], batch: float, ctx: Any) -> Any:
    if dep.drafter is None:
        return 0.0
    passes = np.asarray(v["tree_passes"], float) if dep.passes is None else float(dep.passes)
    per_pass_tokens = np.maximum(dep.tokens_per_pass / passes, 1.0) if dep.scenario.option.tree else dep.tokens_per_pass
    parts = _forward(dep, dep.drafter, v, batch, per_pass_tokens, ctx, drafter=True)
    one = sum(parts.values()) + np.asarray(v["draft_pass_ms"], float)
    return passes * one


def sequences_per_gpu(dep: Deployment, concurrency: float) -> float:
    """The sequences one attention rank steps at ``concurrency`` (DP attention splits them)."""
    return float(concurrency) / max(dep.scenario.parallel.attention_data_parallel, 1)


def mode_at(dep: Deployment, concurrency: float) -> ModeCost:
    """Speculative mode's own cost parts at one concurrency (the per-batch schedule's tax and the
    residual depend on the sequences a GPU steps)."""
    overlap = dep.scenario.engine.overlap
    return mode_cost_parts(str(dep.scenario.engine.name), dep.scenario.engine.version, dep.method,
                           per_batch_schedule=dep.scenario.option.per_batch_schedule,
                           pipeline_parallel=dep.scenario.parallel.pipeline,
                           concurrency=sequences_per_gpu(dep, concurrency),
                           baseline_overlap=overlap.baseline if overlap else None,
                           option_overlap=overlap.option if overlap else None, residual=True,
                           linear_attention_layers=dep.arch.linear_layers)


def _mode_ms(dep: Deployment, v: Mapping[str, Any], baseline_ms: Any, concurrency: float) -> Any:
    mode = mode_at(dep, concurrency)
    u = np.asarray(v["mode_share"], float)
    total: Any = 0.0
    for part in mode.parts:
        lo, hi = (part.low * baseline_ms, part.high * baseline_ms) if part.unit == "fraction" else (part.low, part.high)
        total = total + lo + u * (np.asarray(hi) - np.asarray(lo))
    return np.maximum(total, 0.0)


def _parts_sum(parts: Mapping[str, Any]) -> Any:
    return sum(np.asarray(p, float) for p in parts.values())


def step_times(dep: Deployment, v: Mapping[str, Any], concurrency: int, *, mode_ms: Any | None = None,
               acceptance: Any | None = None) -> StepTimes:
    """The baseline and speculative steps at one concurrency, for input values ``v`` (scalars or
    arrays of one length). ``mode_ms``/``acceptance`` replace the mode share and the acceptance
    input (the sensitivity's closed forms)."""
    ctx = _context(dep, v)
    c = float(concurrency)
    base = _forward(dep, dep.arch, v, c, 1.0, ctx)
    spec = _forward(dep, dep.arch, v, c, float(dep.verify_tokens), ctx)
    base_sum = _parts_sum(base)
    consistent = np.ones(np.shape(base_sum), bool) if np.ndim(base_sum) else np.array(True)
    if dep.anchors:
        fixed_at = {}
        for a, step in dep.anchors.items():
            parts_a = base_sum if a == concurrency else _parts_sum(_forward(dep, dep.arch, v, float(a), 1.0, ctx))
            fixed_at[a] = step - parts_a
            consistent = consistent & (fixed_at[a] >= 0)
        xs = sorted(fixed_at)
        if concurrency in fixed_at:
            fixed = fixed_at[concurrency]
        elif c <= xs[0]:
            fixed = fixed_at[xs[0]]
        elif c >= xs[-1]:
            fixed = fixed_at[xs[-1]]
        else:
            hi = min(x for x in xs if x > c)
            lo = max(x for x in xs if x < c)
            t = (c - lo) / (hi - lo)
            fixed = fixed_at[lo] + t * (fixed_at[hi] - fixed_at[lo])
        fixed = np.maximum(fixed, 0.0)
    else:
        fixed = np.asarray(v["fixed_ms"], float)
    base["fixed"] = fixed
    spec["fixed"] = fixed
    t1 = _parts_sum(base)
    spec["drafter"] = _drafter_ms(dep, v, c, ctx) * np.ones_like(t1)
    spec["mode"] = (_mode_ms(dep, v, t1, c) if mode_ms is None else np.asarray(mode_ms, float)) * np.ones_like(t1)
    tk = _parts_sum(spec)
    al = np.asarray(v["acceptance_length"] if acceptance is None else acceptance, float)
    return StepTimes(base, spec, t1, tk, al * t1 / tk, np.asarray(fixed, float), consistent)
