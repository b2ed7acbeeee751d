"""Measurement: every latency, token and acceptance figure speclab reports comes from here.

Measurement layer: ``client/`` (the streaming client: one parsing core, two transports),
``loadgen`` (plans and runs sweeps, records appended as they arrive), ``metrics`` (``/metrics``
snapshots, deltas, acceptance, foreign traffic), ``summary`` (one level's summary object),
``identity`` (what really runs behind an endpoint) and ``hostload`` (how loaded this machine
was during each level). ``progress`` (vocabulary, so every layer may draw a bar) puts progress
bars with an ETA where the person waiting sees them, never into a headless notebook's report.
Method in ``docs/measurement.md``.
"""

__all__ = ["client", "hostload", "identity", "loadgen", "metrics", "progress", "summary"]
