"""Measurement: every latency, token and acceptance figure speclab reports comes from here.

Measurement layer: ``client/`` (the streaming client: one parsing core, two transports),
``loadgen`` (plans and runs sweeps, records appended as they arrive), ``metrics`` (``/metrics``
snapshots, deltas, acceptance, foreign traffic), ``summary`` (one level's summary object),
``identity`` (what really runs behind an endpoint), ``hostload`` (how loaded this machine
was during each level), ``probe`` (the live verify-cost probe and the head probe on a baseline's
own server, no restart), ``proposer`` (vLLM's own proposer timed per step on a baseline's
sequences), ``selfcheck`` (the baseline's top level partly rerun: bf16's own noise)
and ``calibration`` (``verify_cost: calibrate``'s two runs on real servers). ``progress``
(vocabulary, so every layer may draw a bar) puts progress bars with an ETA where the person
waiting sees them, never into a headless notebook's report. Method in ``docs/measurement.md``.
"""

__all__ = ["calibration", "client", "hostload", "identity", "loadgen", "metrics", "probe", "progress", "proposer", "selfcheck",
           "summary"]
