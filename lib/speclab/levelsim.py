"""Replay one measured sweep level step by step, to see how speculation changes its batch.

A level of a closed-loop sweep keeps at most ``concurrency`` requests in flight; the engine
advances every decoding request by one step at a time (continuous batching). Speculation
does not only make each step emit more tokens: requests whose drafts are accepted often
finish early, so the batch thins out sooner and the slow requests decode the tail of the
level nearly alone, at a cheaper step. Measured on the embedded server at concurrency 16
(14 requests started at once), the n-gram arm decoded 7.0 sequences at a time where the
baseline decoded 10.4, so a model that prices the speculative step at the baseline's
batch over-prices it by 15-20 % (docs/predictor.md).

:func:`simulate_level` replays a level from what a baseline run recorded (the send order,
each request's time to first token) and what the acceptance replay says each decode step
verifies, with a step-time function ``T(batch, extra verified tokens)``. Both arms of a
prediction go through the same simulation, so what it leaves out (prefill mixed into
decode steps, scheduling jitter) cancels in their ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LevelSimulation", "SimRequest", "simulate_level"]

StepTime = Callable[[int, int], float]  # (sequences in the step, extra verified tokens) -> seconds


@dataclass(frozen=True)
class SimRequest:
    """One request of a level, in send order.

    ``ready_s``: seconds from taking a slot to its first decode step (the measured time to
    first token); ``draft_tokens``: per decode step, the draft tokens it verifies beside the
    one token every step emits (all zeros for the baseline arm).
    """

    key: Hashable
    ready_s: float
    draft_tokens: Sequence[int]


@dataclass(frozen=True)
class LevelSimulation:
    """Per request: seconds spent decoding; and the level's effective batch."""

    decode_s: dict[Hashable, float]
    effective_batch: float
    steps: int

    def total_decode_s(self, keys: Sequence[Hashable] | None = None) -> float:
        """Decode seconds summed over ``keys`` (every request when None)."""
        if keys is None:
            return float(sum(self.decode_s.values()))
        return float(sum(self.decode_s[k] for k in keys))


def simulate_level(requests: Sequence[SimRequest], concurrency: int, step_time: StepTime) -> LevelSimulation:
    """Step through one closed-loop level: at most ``concurrency`` requests in flight, a new
    one taking a slot when one finishes; every decoding request advances one step per step.

    The effective batch is decode time summed over requests divided by the time any request
    was decoding (the same definition as the measured one).
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    queue = list(requests)
    next_up = 0
    now = 0.0
    waiting: list[tuple[float, SimRequest]] = []  # (time its first decode step can run, request)
    active: dict[Hashable, list[int]] = {}  # key -> [next step index]
    plans = {r.key: np.asarray(r.draft_tokens, dtype=np.int64) for r in requests}
    decode_s = {r.key: 0.0 for r in requests}
    busy_s = 0.0
    steps = 0

    def take_slots() -> None:
        nonlocal next_up
        while next_up < len(queue) and len(waiting) + len(active) < concurrency:
            request = queue[next_up]
            next_up += 1
            if len(plans[request.key]) == 0:
                continue  # a one-token answer never decodes; its slot frees at once
            waiting.append((now + max(request.ready_s, 0.0), request))

    def admit() -> None:
        for item in [w for w in waiting if w[0] <= now + 1e-12]:
            waiting.remove(item)
            active[item[1].key] = [0]

    take_slots()
    while waiting or active:
        admit()
        if not active:
            now = min(w[0] for w in waiting)
            continue
        batch = len(active)
        extra = int(sum(int(plans[key][state[0]]) for key, state in active.items()))
        dt = float(step_time(batch, extra))
        now += dt
        busy_s += dt
        steps += 1
        for key in list(active):
            decode_s[key] += dt
            active[key][0] += 1
            if active[key][0] >= len(plans[key]):
                del active[key]
        take_slots()
    total = sum(decode_s.values())
    return LevelSimulation(decode_s=decode_s, effective_batch=total / busy_s if busy_s > 0 else 1.0, steps=steps)
