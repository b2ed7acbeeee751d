"""Replay suffix decoding the way vLLM 0.32's SuffixDecodingProposer drives ArcticInference.

Reads JSON on stdin: {"settings": {...}, "requests": [{request_id, level, concurrency,
prompt, output}, ...]} (requests in send order); writes {"implementation": ..., "steps":
{request_id: [[position, draft_tokens, accepted, emitted, past_output], ...]},
"proposer_s": ..., "proposer_seq_steps": ...} on stdout: the last two time the cache calls
the server's proposer makes (start, add response, speculate), summed over every sequence
step, so the proposer's own CPU time per sequence and step can be read off.

Runs with the server venv's python where ``arctic_inference`` is importable (the real
cache), else with a pure-Python re-implementation of its path speculation (``speclab``),
whose tie-breaking between equally frequent continuations may differ from the C++ one.

Engine order: levels in turn; within a level up to ``concurrency`` requests run at once
(admitted in send order as others finish); every engine step, each running request
verifies its pending draft, appends the emitted tokens to the cache (prompt tree and the
server-wide response tree) and drafts again, as ``SuffixDecodingProposer.propose`` does.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict

# --------------------------------------------------------------------------- fallback cache


class _Node:
    __slots__ = ("children", "count", "touched")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.count = 0
        self.touched = 0


class _Tree:
    """Depth-limited suffix trie with occurrence counts (ArcticInference's SuffixTree)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.root = _Node()
        self.seqs: dict[int, list[int]] = defaultdict(list)
        self.clock = 0

    def extend(self, seq_id: int, tokens: list[int]) -> None:
        seq = self.seqs[seq_id]
        for token in tokens:
            seq.append(token)
            end = len(seq)
            # every suffix ending here that fits in the depth gains one occurrence
            for start in range(max(0, end - self.depth), end):
                node = self.root
                if start == end - 1:
                    node.count += 1
                for pos in range(start, end):
                    child = node.children.get(seq[pos])
                    if child is None:
                        child = node.children[seq[pos]] = _Node()
                    if pos == end - 1:
                        child.count += 1
                        self.clock += 1
                        child.touched = self.clock
                    node = child

    def remove(self, seq_id: int) -> None:
        seq = self.seqs.pop(seq_id, [])
        for end in range(1, len(seq) + 1):
            for start in range(max(0, end - self.depth), end):
                node = self.root
                if start == end - 1:
                    node.count -= 1
                path = []
                for pos in range(start, end):
                    path.append((node, seq[pos]))
                    node = node.children[seq[pos]]
                node.count -= 1
                for parent, token in reversed(path):
                    child = parent.children[token]
                    if child.count <= 0 and not child.children:
                        del parent.children[token]

    def _match(self, context: list[int]) -> _Node | None:
        node = self.root
        for token in context:
            node = node.children.get(token)
            if node is None:
                return None
        return node

    def speculate(self, context: list[int], max_spec: int, factor: float, offset: float, min_prob: float):
        best = ([], 0.0, 0)
        for match_len in range(1, len(context)):
            node = self._match(context[len(context) - match_len:])
            if node is None:
                break
            limit = max(min(max_spec, int(match_len * factor + offset + 1e-6)), 0)
            tokens, score, prob = [], 0.0, 1.0
            while len(tokens) < limit and node.children and node.count > 0:
                token, child = max(node.children.items(), key=lambda kv: (kv[1].count, kv[1].touched))
                if child.count <= 0:
                    break
                prob *= child.count / node.count
                if prob < min_prob:
                    break
                tokens.append(token)
                score += prob
                node = child
            if score >= best[1]:
                best = (tokens, score, match_len)
        return best


class _FallbackCache:
    def __init__(self, max_tree_depth: int, max_cached_requests: int) -> None:
        self.depth = max_tree_depth
        self.max_cached = max_cached_requests
        self.global_tree = _Tree(max_tree_depth)
        self.local: dict[str, _Tree] = {}
        self.seq_ids: dict[str, int] = {}
        self.next_id = 0

    @property
    def active_requests(self):
        return self.local.keys()

    def start_request(self, req_id: str, prompt: list[int]) -> None:
        tree = _Tree(self.depth)
        tree.extend(0, list(prompt))
        self.local[req_id] = tree
        if self.max_cached != 0:
            self.seq_ids[req_id] = self.next_id
            self.next_id += 1
            while self.max_cached > 0 and len(self.seq_ids) > self.max_cached:
                oldest = next(iter(self.seq_ids))
                self.global_tree.remove(self.seq_ids.pop(oldest))

    def stop_request(self, req_id: str) -> None:
        del self.local[req_id]

    def add_active_response(self, req_id: str, tokens: list[int]) -> None:
        self.local[req_id].extend(0, list(tokens))
        if req_id in self.seq_ids:
            self.global_tree.extend(self.seq_ids[req_id], list(tokens))

    def speculate(self, req_id, context, max_spec_tokens, max_spec_factor, min_token_prob):
        context = list(context)[-self.depth:]
        a = self.local[req_id].speculate(context, max_spec_tokens, max_spec_factor, 0.0, min_token_prob)
        b = self.global_tree.speculate(context, max_spec_tokens, max_spec_factor, 0.0, min_token_prob)
        return a[0] if a[1] >= b[1] else b[0]


class _ArcticCache:
    def __init__(self, max_tree_depth: int, max_cached_requests: int) -> None:
        from arctic_inference.suffix_decoding import SuffixDecodingCache

        self.cache = SuffixDecodingCache(max_tree_depth=max_tree_depth, max_cached_requests=max_cached_requests)

    @property
    def active_requests(self):
        return self.cache.active_requests

    def start_request(self, req_id, prompt):
        import numpy as np

        if req_id in self.cache.cached_requests:
            self.cache.evict_cached_response(req_id)
        self.cache.start_request(req_id, np.asarray(prompt, dtype=np.int32))

    def stop_request(self, req_id):
        self.cache.stop_request(req_id)

    def add_active_response(self, req_id, tokens):
        self.cache.add_active_response(req_id, list(tokens))

    def speculate(self, req_id, context, max_spec_tokens, max_spec_factor, min_token_prob):
        import numpy as np

        draft = self.cache.speculate(req_id, np.asarray(context, dtype=np.int32), max_spec_tokens=max_spec_tokens,
                                     max_spec_factor=max_spec_factor, min_token_prob=min_token_prob)
        return list(draft.token_ids)


# --------------------------------------------------------------------------- the engine loop


def _verify(draft: list[int], output: list[int], position: int) -> tuple[int, int]:
    known = output[position:position + len(draft)]
    accepted = 0
    while accepted < len(known) and draft[accepted] == known[accepted]:
        accepted += 1
    past = len(draft) - len(known) if accepted == len(known) else 0
    return accepted, past


def replay(payload: dict) -> dict:
    settings = payload["settings"]
    implementation = settings.get("implementation", "auto")
    depth = int(settings["suffix_decoding_max_tree_depth"])
    cached = int(settings["suffix_decoding_max_cached_requests"])
    if implementation in ("auto", "arctic"):
        try:
            cache = _ArcticCache(depth, cached)
            name = "arctic-inference SuffixDecodingCache (real package)"
        except ImportError:
            if implementation == "arctic":
                raise
            cache, name = _FallbackCache(depth, cached), "speclab re-implementation of ArcticInference suffix trees"
    else:
        cache, name = _FallbackCache(depth, cached), "speclab re-implementation of ArcticInference suffix trees"
    k = int(settings["k"])
    factor = float(settings["suffix_decoding_max_spec_factor"])
    min_prob = float(settings["suffix_decoding_min_token_prob"])
    max_len = int(settings["max_model_len"])

    clock = time.perf_counter
    proposer_s, seq_steps = 0.0, 0
    levels: dict[int, list[dict]] = defaultdict(list)
    for request in payload["requests"]:
        levels[request["level"]].append(request)
    steps: dict[str, list[list[int]]] = {}
    for level in sorted(levels):
        queue = list(levels[level])
        concurrency = max(int(queue[0]["concurrency"]), 1)
        running: list[dict] = []
        while queue or running:
            while len(running) < concurrency and queue:
                request = queue.pop(0)
                running.append({"r": request, "pos": 0, "draft": []})
                steps[request["request_id"]] = []
            finished = []
            for state in running:
                request, output = state["r"], state["r"]["output"]
                req_id = request["request_id"]
                if state["pos"] == 0:
                    emitted = output[:1]
                    accepted = 0
                else:
                    draft = state["draft"]
                    accepted, past = _verify(draft, output, state["pos"])
                    emitted = output[state["pos"]:state["pos"] + accepted + 1]
                    steps[req_id].append([state["pos"], len(draft), accepted, len(emitted), past])
                started = clock()
                if req_id not in cache.active_requests:
                    cache.start_request(req_id, request["prompt"])
                cache.add_active_response(req_id, emitted)
                proposer_s += clock() - started
                state["pos"] += accepted + 1
                if state["pos"] >= len(output):
                    finished.append(state)
                    continue
                context = request["prompt"] + output[:state["pos"]]
                num_tokens = len(context)
                pattern = context[max(0, num_tokens - depth):]
                started = clock()
                state["draft"] = cache.speculate(
                    req_id, pattern, max_spec_tokens=min(k, max_len - num_tokens - 1),
                    max_spec_factor=factor, min_token_prob=min_prob)
                proposer_s += clock() - started
                seq_steps += 1
            for state in finished:
                cache.stop_request(state["r"]["request_id"])
                running.remove(state)
    return {"implementation": name, "steps": steps, "proposer_s": proposer_s, "proposer_seq_steps": seq_steps}


if __name__ == "__main__":
    json.dump(replay(json.load(sys.stdin)), sys.stdout)
