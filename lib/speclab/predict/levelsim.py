"""Replay one measured sweep level step by step, as continuous batching runs it.

A level of a closed-loop sweep keeps at most ``concurrency`` requests in flight; the engine
advances every decoding request by one step at a time and takes a newcomer's prompt into a
step beside them (chunked prefill, up to a token budget per step). Two things make a
speculative arm's decode time differ from "fewer steps, each a little dearer":

* **The batch thins out sooner.** Requests whose drafts are accepted finish early, so the
  slow ones decode the level's tail nearly alone, at a cheaper step. At concurrency 16 (14
  requests started at once) the n-gram arm decoded 7.0 sequences at a time where the
  baseline decoded 10.4 (docs/predictor.md).
* **Prefills stall everyone decoding.** Every newcomer's prefill is a step that every
  running sequence waits through, in both arms; the speculative arm emits its tokens in
  fewer steps, so the same prefills are a larger share of its decode time. Priced as part
  of an average baseline step, they were missing from the speculative arm's steps and made
  concurrency 4-8 look 6-14 % better than measured (docs/predictor.md).

:func:`simulate_level` replays a level from what a baseline run recorded (the send order,
each request's prompt length, its decode steps) and what the acceptance replay says each
step verifies and emits, with a step-time function of the step's contents. Both arms of a
prediction go through the same simulation with the same step model, so what it leaves out
cancels in their ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

__all__ = ["ARRIVAL_S", "LevelSimulation", "SimRequest", "StepTime", "simulate_level"]

# (decoding sequences, their context tokens, draft tokens verified, prompt tokens prefilled) -> seconds
StepTime = Callable[[int, int, int, int], float]

# From a slot freeing to the next request reaching the engine (HTTP, chat template,
# tokenisation): a few ms on the embedded server. Its only effect here is that the newcomer
# misses the step already scheduled and joins the one after, as it does on a real engine.
# The server's front end handles requests one at a time, so requests sent together reach the
# engine ARRIVAL_S apart: at a level's start the idle engine begins a step with the first
# prompt alone, and the others are prefilled in the next one, beside the first request's
# decoding (measured on every level of the f32 benchmark runs: docs/predictor.md).
ARRIVAL_S = 0.002


@dataclass(frozen=True)
class SimRequest:
    """One request of a level, in send order.

    ``prompt_tokens``: prefilled in the step that emits its first token; ``draft_tokens``: per
    decode step, the draft tokens it verifies (all zeros for the baseline arm);
    ``emitted_tokens``: per decode step, the tokens it emits (1 each when not given).
    """

    key: Hashable
    prompt_tokens: int
    draft_tokens: Sequence[int]
    emitted_tokens: Sequence[int] | None = None


@dataclass(frozen=True)
class LevelSimulation:
    """Per request: seconds spent decoding (first token to last); the level's effective batch."""

    decode_s: dict[Hashable, float]
    effective_batch: float
    steps: int
    first_token_s: dict[Hashable, float] = field(default_factory=dict)

    def total_decode_s(self, keys: Sequence[Hashable] | None = None) -> float:
        """Decode seconds summed over ``keys`` (every request when None)."""
        if keys is None:
            return float(sum(self.decode_s.values()))
        return float(sum(self.decode_s[k] for k in keys))


@dataclass
class _Running:
    request: SimRequest
    context: int
    step: int = 0


@dataclass
class _Waiting:
    request: SimRequest
    arrives_s: float
    left: int


def simulate_level(requests: Sequence[SimRequest], concurrency: int, step_time: StepTime, *,
                   budget_tokens: int = 2048, arrival_s: float = ARRIVAL_S) -> LevelSimulation:
    """Step through one closed-loop level: at most ``concurrency`` requests in flight, a new
    one sent when one finishes, reaching the engine ``arrival_s`` later (requests sent at
    once reach it ``arrival_s`` apart: the front end passes them on one at a time).

    Each step holds every running request (one token plus its draft) and, within
    ``budget_tokens``, the prompts of arrived requests in order (a prompt that does not fit is
    continued in the next step); a request whose prompt is done emits its first token at the
    end of that step and decodes from the next. The effective batch is decode time summed over
    requests divided by the time anyone was decoding (the measured definition).
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    queue = list(requests)
    sent = 0
    now = 0.0
    waiting: list[_Waiting] = []
    running: dict[Hashable, _Running] = {}
    first: dict[Hashable, float] = {}
    decode_s = {r.key: 0.0 for r in requests}
    busy_s = 0.0
    steps = 0

    front_free = 0.0  # when the server's front end can pass on the next request

    def send(at: float) -> None:
        nonlocal sent, front_free
        if sent < len(queue):
            request = queue[sent]
            sent += 1
            front_free = max(at, front_free) + arrival_s
            waiting.append(_Waiting(request, front_free, max(int(request.prompt_tokens), 1)))

    for _ in range(min(concurrency, len(queue))):
        send(0.0)
    while waiting or running:
        arrived = [w for w in waiting if w.arrives_s <= now + 1e-12]
        if not running and not arrived:
            now = min(w.arrives_s for w in waiting)
            continue
        budget = budget_tokens
        seqs = context = drafts = 0
        for state in running.values():
            draft = int(state.request.draft_tokens[state.step])
            seqs += 1
            context += state.context
            drafts += draft
            budget -= 1 + draft
        prefill, done = 0, []
        for item in arrived:
            if budget <= 0:
                break
            take = min(item.left, budget)
            budget -= take
            item.left -= take
            prefill += take
            if item.left == 0:
                done.append(item)
        dt = float(step_time(seqs, context, drafts, prefill))
        now += dt
        steps += 1
        if seqs:
            busy_s += dt
        finished = []
        for key, state in running.items():
            decode_s[key] += dt
            emitted = state.request.emitted_tokens
            state.context += int(emitted[state.step]) if emitted is not None else 1
            state.step += 1
            if state.step >= len(state.request.draft_tokens):
                finished.append(key)
        for key in finished:
            del running[key]
            send(now)
        for item in done:
            waiting.remove(item)
            first[item.request.key] = now
            if len(item.request.draft_tokens):
                running[item.request.key] = _Running(item.request, int(item.request.prompt_tokens) + 1)
            else:
                send(now)  # a one-token answer never decodes; its slot frees at once
    total = sum(decode_s.values())
    return LevelSimulation(decode_s=decode_s, effective_batch=total / busy_s if busy_s > 0 else 1.0, steps=steps,
                           first_token_s=first)
