"""vLLM's n-gram replay, compiled: the same drafts as :func:`speclab.predict.replay.ngram_propose`,
millions of positions per second per core.

:func:`speclab.predict.replay.ngram_propose` ports vLLM 0.32's KMP search, which rescans the whole
context at every step (quadratic in the request's length). Its answer is fully determined
by two facts: the longest n (``min_n <= n <= max_n``) whose context-suffix n-gram also ends
somewhere at or before ``len(context) - 2``, and the EARLIEST such occurrence. Both can be
kept incrementally: a hash table from (n, n-gram) to the first index where it ended, filled
as the context grows (an entry is never overwritten, so it stays the earliest). A step is
then ``max_n - min_n + 1`` look-ups instead of a scan.

Exactness: the table stores a 64-bit rolling hash; every hit is verified token by token, and
on a mismatch (a hash collision, vanishingly rare) that step falls back to the KMP port
compiled here, so the drafts equal the reference's always (tests compare them on random
contexts with tiny vocabularies, where ties and overlaps are frequent).

Counters per request follow :class:`speclab.predict.replay._Counters` exactly (vLLM's scheduler
and ``SpecDecodingStats``): see :data:`COUNTER_COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

__all__ = ["COUNTER_COLUMNS", "counter_columns", "pack_requests", "replay_ngram_batch"]

# Per request, in this order, then accepted_pos1..k (drafts accepted at least i tokens).
COUNTER_COLUMNS = ("decode_steps", "decode_tokens", "drafts", "draft_tokens", "accepted_tokens",
                   "draft_tokens_past_output")

_BASE = np.uint64(0x100000001B3)  # FNV prime as the polynomial base (odd, large)
_MIX = np.uint64(0x9E3779B97F4A7C15)


def counter_columns(k: int) -> list[str]:
    """Column names of :func:`replay_ngram_batch`'s output for draft length ``k``."""
    return list(COUNTER_COLUMNS) + [f"accepted_pos{i + 1}" for i in range(k)]


@numba.njit(cache=True, nogil=True)
def _kmp_start(ctx: np.ndarray, total: int, min_n: int, max_n: int) -> int:
    """vLLM's KMP search over ``ctx[:total]``: index where the draft starts, or -1."""
    lps = np.zeros(max_n, np.int64)
    longest = 0
    position = 0
    prev = 0
    i = 1
    while i < total:
        if ctx[total - 1 - prev] == ctx[total - 1 - i]:
            prev += 1
            if prev >= longest:
                longest = prev
                position = i
            if i < max_n:
                lps[i] = prev
            if prev == max_n:
                prev = lps[max_n - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_n:
        return -1
    return total - 1 - position + longest


@numba.njit(cache=True, nogil=True, inline="always")
def _slot_of(key: np.uint64, mask: int) -> np.int64:
    # splitmix64 finaliser: spreads the polynomial hash over the table
    z = key
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(z & np.uint64(mask))


@numba.njit(cache=True, nogil=True)
def _replay_batch(tokens, offsets, prompt_lens, min_n, max_n, k, max_model_len, out, fallbacks):
    n_req = offsets.shape[0] - 1
    longest_ctx = 1
    for r in range(n_req):
        longest_ctx = max(longest_ctx, offsets[r + 1] - offsets[r])
    sizes = max_n - min_n + 1
    cap = 16
    while cap < 2 * longest_ctx * sizes + 16:
        cap *= 2
    mask = cap - 1
    keys = np.zeros(cap, np.uint64)
    ends = np.zeros(cap, np.int64)
    stamp = np.zeros(cap, np.int64)  # entry valid when stamp == request + 1: no clearing
    pow_n = np.ones(max_n + 1, np.uint64)
    for n in range(1, max_n + 1):
        pow_n[n] = pow_n[n - 1] * _BASE
    for r in range(n_req):
        ctx = tokens[offsets[r]:offsets[r + 1]]
        length = ctx.shape[0]
        prompt = prompt_lens[r]
        n_out = length - prompt
        gen = r + 1
        prefix = np.empty(length + 1, np.uint64)
        prefix[0] = np.uint64(0)
        for i in range(length):
            prefix[i + 1] = prefix[i] * _BASE + np.uint64(ctx[i] + 1)
        inserted = -1  # n-grams ending at indices <= inserted are in the table
        position = 1  # the prefill step emitted output[0]
        while position < n_out:
            total = prompt + position
            start = -1
            kk = min(k, max_model_len - total)
            if total >= min_n and kk > 0:
                # the table must hold every n-gram ending at or before total - 2
                for end in range(inserted + 1, total - 1):
                    for n in range(min_n, max_n + 1):
                        if end - n + 1 < 0:
                            break
                        key = (prefix[end + 1] - prefix[end + 1 - n] * pow_n[n]) + np.uint64(n) * _MIX
                        slot = _slot_of(key, mask)
                        while stamp[slot] == gen and keys[slot] != key:
                            slot = (slot + 1) & mask
                        if stamp[slot] != gen:  # absent: first (earliest) occurrence
                            stamp[slot] = gen
                            keys[slot] = key
                            ends[slot] = end
                inserted = max(inserted, total - 2)
                for n in range(max_n, min_n - 1, -1):
                    if n > total - 1:
                        continue
                    key = (prefix[total] - prefix[total - n] * pow_n[n]) + np.uint64(n) * _MIX
                    slot = _slot_of(key, mask)
                    while stamp[slot] == gen and keys[slot] != key:
                        slot = (slot + 1) & mask
                    if stamp[slot] != gen:
                        continue
                    end = ends[slot]
                    same = True
                    for j in range(n):
                        if ctx[end - j] != ctx[total - 1 - j]:
                            same = False
                            break
                    if same:
                        start = end + 1
                    else:  # hash collision: the compiled KMP port decides this step
                        fallbacks[0] += 1
                        start = _kmp_start(ctx, total, min_n, max_n)
                    break
            draft_len = 0
            if start >= 0:
                draft_len = min(kk, total - start)
            accepted = 0
            known = min(draft_len, n_out - position)
            while accepted < known and ctx[start + accepted] == ctx[total + accepted]:
                accepted += 1
            past = draft_len - known if accepted == known else 0
            emitted = min(accepted + 1, n_out - position)
            out[r, 0] += 1
            out[r, 1] += emitted
            out[r, 5] += past
            if draft_len > 0:
                out[r, 2] += 1
                out[r, 3] += draft_len
                out[r, 4] += accepted
                for i in range(min(accepted, k)):
                    out[r, 6 + i] += 1
            position += accepted + 1


def pack_requests(prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat token array (prompt + output per request), offsets and prompt lengths."""
    lengths = np.fromiter((len(p) + len(o) for p, o in zip(prompts, outputs, strict=True)), np.int64,
                          count=len(prompts))
    offsets = np.zeros(len(prompts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.empty(int(offsets[-1]), np.int64)
    for i, (p, o) in enumerate(zip(prompts, outputs, strict=True)):
        a = offsets[i]
        tokens[a:a + len(p)] = p
        tokens[a + len(p):offsets[i + 1]] = o
    prompt_lens = np.fromiter((len(p) for p in prompts), np.int64, count=len(prompts))
    return tokens, offsets, prompt_lens


def replay_ngram_batch(tokens: np.ndarray, offsets: np.ndarray, prompt_lens: np.ndarray,
                       min_n: int, max_n: int, k: int, max_model_len: int) -> tuple[np.ndarray, int]:
    """vLLM n-gram counters per request (rows) in :func:`counter_columns` order, and the
    number of steps decided by the KMP fallback (hash collisions; normally 0)."""
    if not 1 <= min_n <= max_n:
        raise ValueError(f"need 1 <= prompt_lookup_min <= prompt_lookup_max; got {min_n}, {max_n}")
    out = np.zeros((len(offsets) - 1, len(COUNTER_COLUMNS) + k), np.int64)
    fallbacks = np.zeros(1, np.int64)
    _replay_batch(np.ascontiguousarray(tokens, np.int64), np.ascontiguousarray(offsets, np.int64),
                  np.ascontiguousarray(prompt_lens, np.int64), int(min_n), int(max_n), int(k),
                  int(max_model_len), out, fallbacks)
    return out, int(fallbacks[0])
