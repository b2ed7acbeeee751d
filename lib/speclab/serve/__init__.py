"""Servers: start, reach and record the server a run measures (server layer).

``launch`` describes a vLLM or SGLang launch as data and runs it (``ServerLaunch``,
``ManagedServer``); ``embedded`` is the embedded default (server venv, SmolLM2 conversion,
EAGLE-3 head, launch; ``docs/embedded-server.md``); ``target`` starts or reaches a server,
probes it, checks the declared option and records it (``serve_target``).
"""

__all__ = ["embedded", "launch", "target"]
