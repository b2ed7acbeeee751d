"""Profiling: where decode time goes, from real profiler traces.

``trace`` stream-parses Chrome traces; ``buckets`` names what time is cut into; ``analysis``
turns traces into tidy tables (steps, breakdown, summary, scaling, overlap); ``plots`` draws
them; ``capture`` records a trace from a live server under load (measurement, imported on
its own); ``hta`` cross-checks against HolisticTraceAnalysis.
"""

from speclab.profiling.analysis import ProfileReport, analyse_profile, analyse_traces, parse_step_annotation
from speclab.profiling.buckets import DEFAULT_BUCKETS, BucketRule, ProfileParams
from speclab.profiling.plots import plot_bucket_scaling, plot_step_breakdown
from speclab.profiling.trace import RankTrace, find_trace_files, read_trace, read_traces, trim_trace

__all__ = [
    "DEFAULT_BUCKETS",
    "BucketRule",
    "ProfileParams",
    "ProfileReport",
    "RankTrace",
    "analyse_profile",
    "analyse_traces",
    "find_trace_files",
    "parse_step_annotation",
    "plot_bucket_scaling",
    "plot_step_breakdown",
    "read_trace",
    "read_traces",
    "trim_trace",
]
