"""Speculative mode's own cost: what a speculative step costs beyond verifying its tokens.

A speculative server pays, every step, for things a decode step of the same batch does not:
a CPU proposer's time, the scheduling overlap some engines turn off when speculating, the
CUDA-graph mode a per-batch-size schedule forces, an extra pipeline round under pipeline
parallelism. No probe of the baseline sees them. This module holds them as data with their
sources, and one function that lists the parts for an engine, version and method
(:func:`mode_cost_parts`).

Each part is a :class:`ModeCostPart`: a ``[low, high]`` range either in ms per step or as a
fraction of the baseline's decode step (``unit``; :meth:`ModeCostPart.ms` converts), a label
(*measured*, *fitted*, *borrowed*, *assumed*) and its source sentence. An engine, or a method
of an engine, that is not in the table gives :attr:`ModeCost.refusal` (a sentence); a version
the table cannot place gives an ``async_scheduling_lost`` part spanning kept (0) and lost, with
the sentence in :attr:`ModeCost.unknown`, so the caller can refuse or span, never guess.

Only GPU-side parts from published sources live here for now; CPU-measured parts (a proposer
timed on the host, overlap lost measured from a profile, instance spread, residual) are meant
to join the same list with label *measured*.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "DSD_K0_TAX",
    "ENGINES",
    "OVERLAP_LOST_FRACTION",
    "OVERLAP_RULES",
    "RESIDUAL_FRACTION",
    "ModeCost",
    "ModeCostPart",
    "OverlapRule",
    "OverlapStatus",
    "mode_cost_parts",
    "normalise_method",
    "overlap_status",
    "total_fraction",
]

Label = Literal["measured", "fitted", "borrowed", "assumed"]
Unit = Literal["ms", "fraction"]
Overlap = Literal["kept", "lost", "unknown"]

ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True)
class ModeCostPart:
    """One part of speculative mode's own cost per step.

    ``unit`` ``"ms"``: ``low``/``high`` are ms per speculative step; ``"fraction"``: they are
    fractions of the baseline's decode step at the same concurrency (0.15 = +15 %).
    """

    name: str  # proposer | async_scheduling_lost | cuda_graph_mode | dynamic_schedule | pipeline_round | ...
    low: float
    high: float
    unit: Unit
    label: Label
    source: str

    def ms(self, baseline_step_ms: float) -> tuple[float, float]:
        """``(low, high)`` in ms per step, given the baseline's decode step (ms)."""
        if self.unit == "ms":
            return self.low, self.high
        return self.low * baseline_step_ms, self.high * baseline_step_ms


@dataclass(frozen=True)
class OverlapRule:
    """One row of the table: whether ``engine`` at ``versions`` keeps the CPU/GPU overlap
    (vLLM's async scheduling, SGLang's overlap scheduler) when speculating with ``methods``.

    ``versions``: ``"any"``, ``">=X"``, ``"<=X"``, ``"X..Y"`` (inclusive) in dotted numbers.
    """

    engine: str
    versions: str
    methods: tuple[str, ...]
    overlap: Overlap
    source: str


@dataclass(frozen=True)
class OverlapStatus:
    status: Overlap
    source: str


_VLLM_032 = ("vLLM 0.32 vllm/config/vllm.py, VllmConfig.__post_init__'s async-scheduling block: async scheduling "
             "stays on only for EAGLE/MTP (EagleModelTypes), ngram_gpu, draft_model, dspark and dflash; any other "
             "method logs 'Async scheduling not supported with %s-based speculative decoding and will be disabled'")
_SGLANG_056 = ("SGLang v0.5.6 python/sglang/srt/server_args.py, _handle_speculative_decoding: EAGLE/EAGLE3/STANDALONE "
               "set disable_overlap_schedule unless SGLANG_ENABLE_SPEC_V2 (EAGLE, topk 1; 'experimental' in the docs); "
               "NGRAM always ('The overlap scheduler and mixed chunked prefill are disabled because of using ngram "
               "speculative decoding'); the lmsys MTP blog (2025-07-17) ran MTP without overlap for the same reason")
_SGLANG_MAIN = ("SGLang main in 2026 (python/sglang/srt/arg_groups/speculative_hook.py at 004c82e): "
                "'SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker'; overlap "
                "stays on unless --disable-overlap-schedule or a CPU device, for EAGLE-family and NGRAM alike")

# Methods by the names the scenario schema uses (``option.method``); engines' spellings are
# mapped by :func:`normalise_method`.
_VLLM_KEEPS = ("eagle", "eagle3", "mtp", "ngram_gpu", "draft_model", "dspark", "dflash")
_VLLM_DROPS = ("ngram", "suffix", "medusa", "mlp_speculator")

OVERLAP_RULES: tuple[OverlapRule, ...] = (
    OverlapRule("vllm", ">=0.32", _VLLM_KEEPS, "kept", _VLLM_032),
    OverlapRule("vllm", ">=0.32", _VLLM_DROPS, "lost", _VLLM_032),
    # Before 0.32 the table holds no reading of the source: async scheduling itself, and its
    # support for each method, arrived over several releases.
    OverlapRule("vllm", "<=0.31.99", _VLLM_KEEPS + _VLLM_DROPS, "unknown",
                "no vLLM source before 0.32 read for this table"),
    OverlapRule("sglang", "0.4.0..0.5.6", ("eagle", "eagle3", "mtp", "draft_model", "ngram"), "lost", _SGLANG_056),
    OverlapRule("sglang", "0.5.7..0.5.99", ("eagle", "eagle3", "mtp", "draft_model", "ngram", "dspark", "dflash"),
                "unknown", "no SGLang source between v0.5.6 and the 2026 main read for this table (Spec V2 "
                "became the default in this span: sgl-project/sglang#23005)"),
    OverlapRule("sglang", ">=0.6", ("eagle", "eagle3", "mtp", "draft_model", "ngram", "dspark", "dflash"), "kept",
                _SGLANG_MAIN),
    OverlapRule("trtllm", "any", ("mtp",), "kept",
                "TensorRT-LLM tech blog 2 (DeepSeek-R1 MTP): the min-latency MTP configuration lists the overlap "
                "scheduler among its optimisations (1.03x); version not given"),
    OverlapRule("trtllm", "any", ("ngram",), "kept",
                "TensorRT-LLM tech blog 7 (N-Gram): the n-gram proposer runs on the host inside the iteration; "
                "its cost is the proposer part, not a lost overlap"),
)

# The overlap an engine hides, as a fraction of the overlapped (baseline) step: SGLang's
# overlap scheduler alone took DeepSeek-V3 on 16 H200 from 51.0 to 60.4 tok/s per rank
# (lmsys blog 2025-07-17: a lost overlap costs 60.4/51.0 - 1 = 18.4 % of the overlapped step);
# SGLang PR #9588 measured 5-10 % from overlap with speculation. vLLM's async scheduling is
# assumed to hide a like share.
OVERLAP_LOST_FRACTION = (0.05, 0.184)
_OVERLAP_SOURCE = ("overlap lost: 5-18.4 % of the overlapped step (SGLang's overlap scheduler: +5-10 % with "
                   "speculation, sgl-project/sglang#9588; +18.4 % on DeepSeek-V3, 16 H200, lmsys MTP blog "
                   "2025-07-17); vLLM's async scheduling assumed to hide a like share")

# Dynamic speculative decoding (num_speculative_tokens_per_batch_size) with zero drafts: TPOT
# +6.56 % at concurrency 2 (14.37 -> 15.32 ms) and +21.58 % at 189 (77.16 -> 93.82 ms), 1x H100
# NVL, vLLM 0.27.1, gemma-4-31B FP8 (vllm-project/vllm#49548 follow-up). It forces PIECEWISE
# CUDA graphs on Model Runner V1: -14 % single-stream tok/s (59.6 -> 50.0, Qwen3.5-122B MTP k=2;
# vllm#49548, #48494), i.e. +16.3 % step time.
DSD_K0_TAX: dict[int, float] = {2: 0.0656, 189: 0.2158}
PIECEWISE_STEP_FRACTION = 1.0 / (1.0 - 0.14) - 1.0
_DSD_SOURCE = ("dynamic speculative decoding at K=0: TPOT +6.6 % at c=2, +21.6 % at c=189 (1x H100 NVL, vLLM 0.27.1, "
               "gemma-4-31B FP8; vllm-project/vllm#49548)")
_PIECEWISE_SOURCE = ("PIECEWISE instead of full CUDA graphs under a per-batch-size schedule: -14 % single-stream "
                     "tok/s = +16.3 % step time (Qwen3.5-122B MTP k=2; vllm-project/vllm#49548, #48494)")

# Pipeline parallelism over slow links: "a fixed ~25 ms per speculative round against a 16.3 ms
# baseline decode step (extra drafter launch + extra collectives)" (PP4/TP1, 4x SM80, PCIe Gen2
# x4, MTP; vllm-project/vllm#44697, comment 2026-09-01). The sentence reads two ways: a round of
# 25 ms (+53 % of the step) or 25 ms on top of it (+153 %); the second is the one under which k=1
# loses, as the comment says it did. The range spans both readings.
PIPELINE_ROUND_FRACTION = (25.0 / 16.3 - 1.0, 25.0 / 16.3)
_PIPELINE_SOURCE = ("'a fixed ~25 ms per speculative round against a 16.3 ms baseline decode step' under PP4 over "
                    "PCIe Gen2 x4 (vllm-project/vllm#44697): +53 % (a 25 ms round) to +153 % (25 ms added) of the "
                    "step; one measurement, not scaled to other links")

# CPU proposers (assumed until the host-measured parts land here).
_PROPOSER_MS: dict[str, tuple[float, float, str]] = {
    "ngram": (0.05, 0.5, "assumed: a CPU n-gram lookup over the batch, 0.05-0.5 ms a step"),
    "suffix": (0.1, 1.0, "assumed: suffix-tree lookups on the CPU, 0.1-1 ms a step"),
}
_TRTLLM_NGRAM = ("TensorRT-LLM tech blog 7 (N-Gram speculative decoding, auto-enablement): the policy 'adds less "
                 "than 15% overhead to iteration latency'")

_METHOD_ALIASES = {
    "eagle-3": "eagle3", "eagle_3": "eagle3", "nextn": "mtp", "deepseek_mtp": "mtp", "standalone": "draft_model",
    "draft": "draft_model", "ngram-gpu": "ngram_gpu", "ngram_gpu": "ngram_gpu", "n-gram": "ngram",
}


def normalise_method(method: str) -> str:
    """The schema's method name for an engine's spelling (``NEXTN`` -> ``mtp``, ``*_mtp`` -> ``mtp``)."""
    m = method.strip().lower()
    m = _METHOD_ALIASES.get(m, m)
    return "mtp" if m.endswith("_mtp") else m


def _parse_version(version: str | None) -> tuple[int, ...] | None:
    if version is None:
        return None
    match = re.fullmatch(r"v?(\d+(?:\.\d+)*)(?:[.+-]?(?:post|rc|dev)\w*)?", str(version).strip())
    if not match:
        return None
    return tuple(int(p) for p in match.group(1).split("."))


def _in_range(version: tuple[int, ...], spec: str) -> bool:
    def num(text: str) -> tuple[int, ...]:
        parsed = _parse_version(text)
        assert parsed is not None, text
        return parsed

    def cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
        n = max(len(a), len(b))
        a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
        return (a > b) - (a < b)

    if spec == "any":
        return True
    if spec.startswith(">="):
        return cmp(version, num(spec[2:])) >= 0
    if spec.startswith("<="):
        return cmp(version, num(spec[2:])) <= 0
    low, high = spec.split("..")
    return cmp(version, num(low)) >= 0 and cmp(version, num(high)) <= 0


def overlap_status(engine: str, version: str | None, method: str) -> OverlapStatus:
    """Whether ``engine`` at ``version`` keeps its CPU/GPU overlap when speculating with
    ``method``: ``kept``, ``lost``, or ``unknown`` (engine, method or version not in the table;
    the source says which)."""
    eng, meth = engine.strip().lower(), normalise_method(method)
    rows = [r for r in OVERLAP_RULES if r.engine == eng and meth in r.methods]
    if not rows:
        return OverlapStatus("unknown", f"{engine} with {method} is not in the mode table")
    parsed = _parse_version(version)
    if parsed is not None:
        hit = [r for r in rows if _in_range(parsed, r.versions)]
        if hit:
            return OverlapStatus(hit[0].overlap, hit[0].source)
        return OverlapStatus("unknown", f"{engine} {version} is outside the versions the mode table covers")
    unversioned = [r for r in rows if r.versions == "any"]
    if unversioned:
        return OverlapStatus(unversioned[0].overlap, unversioned[0].source)
    states = {r.overlap for r in rows}
    if states == {"kept"} or states == {"lost"}:
        return OverlapStatus(rows[0].overlap, rows[0].source + " (version not given; every row agrees)")
    what = "not given" if version is None else f"{version!r} not a release number"
    return OverlapStatus("unknown", f"the {engine} version is {what}, and the versions in the mode table "
                                    f"disagree on whether {meth} keeps the overlap")


@dataclass
class ModeCost:
    """The mode-cost parts of one engine, version and method (:func:`mode_cost_parts`).

    ``refusal``: a sentence when the engine or the method is not in the table (no parts then);
    ``unknown``: sentences naming what the table could not place (the parts span it).
    """

    parts: list[ModeCostPart] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    refusal: str | None = None

    def ms(self, baseline_step_ms: float) -> tuple[float, float]:
        """The parts' sum, ``(low, high)`` ms per step."""
        ranges = [p.ms(baseline_step_ms) for p in self.parts]
        return sum(r[0] for r in ranges), sum(r[1] for r in ranges)


_KNOWN_METHODS = {"vllm": set(_VLLM_KEEPS + _VLLM_DROPS),
                  "sglang": {"eagle", "eagle3", "mtp", "draft_model", "ngram", "dspark", "dflash"},
                  "trtllm": {"mtp", "ngram"}}


def _interp_log(concurrency: float, table: dict[int, float]) -> float:
    xs = sorted(table)
    c = min(max(float(concurrency), xs[0]), xs[-1])
    lo = max(x for x in xs if x <= c)
    hi = min(x for x in xs if x >= c)
    if lo == hi:
        return table[lo]
    t = (math.log(c) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return table[lo] + t * (table[hi] - table[lo])


# What a speculative server pays that no part above names (host syncs per step, sampling and
# bookkeeping, state copies of hybrid models, a CUDA-graph mode that differs with speculation):
# 0 to 20 % of a decode step, the span of the mode taxes measured in the open (a dynamic
# schedule's K=0 tax +6.6 to +21.6 %, PIECEWISE graphs +16 %; vllm-project/vllm#49548). Assumed
# until the host-measured residual replaces it.
RESIDUAL_FRACTION = (0.0, 0.20)
_RESIDUAL_SOURCE = ("what published speculative servers pay beyond named parts: 0-20 % of a decode step (assumed; "
                    "the span of the open mode-tax measurements, +6.6 to +21.6 % K=0 tax and +16 % PIECEWISE graphs, "
                    "vllm-project/vllm#49548)")


def mode_cost_parts(engine: str, version: str | None, method: str, *, per_batch_schedule: bool = False,
                    pipeline_parallel: int = 1, concurrency: float | None = None,
                    baseline_overlap: bool | None = None, option_overlap: bool | None = None,
                    residual: bool = False) -> ModeCost:
    """The GPU-side parts of speculative mode's own cost for one deployment.

    ``per_batch_schedule``: vLLM's ``num_speculative_tokens_per_batch_size`` is set (its K=0 tax
    and PIECEWISE graphs); ``pipeline_parallel`` > 1 adds a pipeline round; ``concurrency`` places
    the K=0 tax (default: its low end). ``baseline_overlap``/``option_overlap``: what a source
    states about the two arms' overlap, in place of the table (``None``: from the table).

    Parts with ``unit == "fraction"`` are fractions of the baseline's decode step
    (:meth:`ModeCostPart.ms`). ``residual``: add the assumed 0-20 % of a step no named part
    explains (off by default; the what-if turns it on; leave it off where a measured residual
    takes its place). A model-based drafter's
    GPU time is not here: it is the step model's (``speclab.whatif.step``).
    """
    eng, meth = engine.strip().lower(), normalise_method(method)
    if eng not in _KNOWN_METHODS:
        return ModeCost(refusal=f"The engine {engine!r} is not in the mode table ({', '.join(ENGINES)}), so speculative "
                                "mode's own cost on it is unknown.")
    if meth not in _KNOWN_METHODS[eng]:
        return ModeCost(refusal=f"{engine} with method {method!r} is not in the mode table (known: "
                                f"{', '.join(sorted(_KNOWN_METHODS[eng]))}), so its mode's own cost is unknown.")
    out = ModeCost()
    low_f, high_f = OVERLAP_LOST_FRACTION
    # vLLM's V1 model runner turns async scheduling off under pipeline parallelism for every arm.
    pp_off = eng == "vllm" and pipeline_parallel > 1
    if baseline_overlap is not None or option_overlap is not None:
        base = True if baseline_overlap is None else baseline_overlap
        opt = True if option_overlap is None else option_overlap
        lost = base and not opt
        out.parts.append(ModeCostPart("async_scheduling_lost", low_f if lost else 0.0, high_f if lost else 0.0,
                                      "fraction", "borrowed",
                                      f"the source states overlap {'on' if base else 'off'} in the baseline and "
                                      f"{'on' if opt else 'off'} with speculation; " + _OVERLAP_SOURCE))
    elif pp_off:
        out.parts.append(ModeCostPart("async_scheduling_lost", 0.0, 0.0, "fraction", "borrowed",
                                      "vLLM 0.32 turns async scheduling off under pipeline parallelism with the V1 "
                                      "model runner in both arms (VllmConfig.__post_init__): nothing lost"))
    else:
        status = overlap_status(eng, version, meth)
        if status.status == "kept":
            out.parts.append(ModeCostPart("async_scheduling_lost", 0.0, 0.0, "fraction", "borrowed",
                                          f"kept: {status.source}"))
        elif status.status == "lost":
            out.parts.append(ModeCostPart("async_scheduling_lost", low_f, high_f, "fraction", "borrowed",
                                          f"lost: {status.source}; {_OVERLAP_SOURCE}"))
        else:
            out.unknown.append(f"Whether {engine} {version or '(version not given)'} keeps its scheduling overlap "
                               f"with {meth} is unknown: {status.source}.")
            out.parts.append(ModeCostPart("async_scheduling_lost", 0.0, high_f, "fraction", "assumed",
                                          f"unknown ({status.source}): spans kept (0) to lost; {_OVERLAP_SOURCE}"))
    if meth in _PROPOSER_MS and eng in {"vllm", "sglang"}:
        lo, hi, src = _PROPOSER_MS[meth]
        out.parts.append(ModeCostPart("proposer", lo, hi, "ms", "assumed", src))
    elif meth == "ngram" and eng == "trtllm":
        out.parts.append(ModeCostPart("proposer", 0.0, 0.15, "fraction", "borrowed", _TRTLLM_NGRAM))
    if per_batch_schedule:
        if eng != "vllm":
            out.unknown.append(f"A per-batch-size schedule on {engine} is not in the mode table.")
        tax = _interp_log(concurrency if concurrency is not None else 2, DSD_K0_TAX)
        out.parts.append(ModeCostPart("cuda_graph_mode", PIECEWISE_STEP_FRACTION, PIECEWISE_STEP_FRACTION, "fraction",
                                      "borrowed", _PIECEWISE_SOURCE))
        out.parts.append(ModeCostPart("dynamic_schedule", 0.0, max(tax - PIECEWISE_STEP_FRACTION, 0.0), "fraction",
                                      "borrowed", f"{_DSD_SOURCE}: {tax:+.1%} here, less the graph mode it includes "
                                      "(low end 0: the two measurements overlap)"))
    if residual:
        out.parts.append(ModeCostPart("residual", RESIDUAL_FRACTION[0], RESIDUAL_FRACTION[1], "fraction", "assumed",
                                      _RESIDUAL_SOURCE))
    if pipeline_parallel > 1:
        out.parts.append(ModeCostPart("pipeline_round", PIPELINE_ROUND_FRACTION[0], PIPELINE_ROUND_FRACTION[1], "fraction",
                                      "borrowed", _PIPELINE_SOURCE))
    return out


def total_fraction(parts: Sequence[ModeCostPart]) -> tuple[float, float]:
    """The fraction-unit parts' sum ``(low, high)`` (ms-unit parts left out)."""
    frac = [p for p in parts if p.unit == "fraction"]
    return sum(p.low for p in frac), sum(p.high for p in frac)
