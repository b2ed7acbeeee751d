"""Build the MoE routing fixtures in the engines' own formats (run with a python that has torch):

    /work/main/.venv-server/bin/python tests/data/moe/make_fixtures.py

* ``sglang_per_pass/expert_distribution_recorder_<t>_0.pt`` and ``sglang_per_token/...``:
  what SGLang's ``_DetailAccumulator.dump`` writes (``torch.save`` of
  ``{"records": [...], "last_physical_to_logical_map": ...}``), records shaped as
  ``_SelectExpertsSinglePassGatherer`` / ``_DetailSinglePassGatherer.collect`` build them
  (python/sglang/srt/eplb/expert_distribution.py).
* ``vllm_chat_response.json``: a chat completion whose choice carries ``routed_experts`` as
  vLLM 0.32 encodes it (base64 of ``np.save`` bytes, [tokens - 1, layers, top_k], uint8).
* ``sglang_generate_response.json``: a ``/generate`` body with ``meta_info.routed_experts``
  (base64 of raw int32 bytes, [prompt + output - 1, layers, top_k]).

Routing is synthetic and known: 64 logical experts, top-8, 4 MoE layers; each token keeps
each of the previous token's experts with probability ``STICK`` and draws the rest uniformly,
so the tests can check the parsers and the fit against the truth.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).parent
EXPERTS, TOP_K, LAYERS, STICK = 64, 8, 4, 0.5
rng = np.random.default_rng(12)


def sticky_routes(tokens: int, stick: float) -> np.ndarray:
    """[tokens, layers, top_k] with adjacent-token reuse ``stick``."""
    out = np.zeros((tokens, LAYERS, TOP_K), dtype=np.int64)
    for layer in range(LAYERS):
        prev: list[int] = []
        for t in range(tokens):
            kept = [e for e in prev if rng.random() < stick]
            pool = [e for e in rng.permutation(EXPERTS) if e not in kept]
            row = (kept + pool)[:TOP_K]
            out[t, layer] = row
            prev = row
    return out


def physical_map() -> torch.Tensor:
    """EPLB-style: 66 physical slots, logical experts 3 and 17 replicated at the end."""
    row = list(range(EXPERTS)) + [3, 17]
    return torch.tensor([row] * LAYERS, dtype=torch.int64)


def to_physical(ids: np.ndarray) -> np.ndarray:
    """Send every second use of experts 3 / 17 to their replicas (slots 64 / 65)."""
    out = ids.copy()
    flat = out.reshape(-1)
    for logical, replica in ((3, 64), (17, 65)):
        hits = np.flatnonzero(flat == logical)
        flat[hits[1::2]] = replica
    return out


def count(ids_layer_major: np.ndarray, physical: int) -> torch.Tensor:
    """global_physical_count [layers, physical]: scatter-add of the top-k ids (-1 ignored)."""
    out = torch.zeros((LAYERS, physical), dtype=torch.int32)
    for layer in range(LAYERS):
        ids = torch.from_numpy(ids_layer_major[layer].reshape(-1))
        ids = ids[ids >= 0]
        out[layer].scatter_add_(0, ids, torch.ones_like(ids, dtype=torch.int32))
    return out


def passes() -> list[dict]:
    """Alternating passes: 4 sequences decoding 1 token (DECODE = 2), then verifying 5 (TARGET_VERIFY = 5)."""
    out = []
    for pass_id in range(6):
        verify = pass_id % 2 == 1
        per_seq = 5 if verify else 1
        routes = np.concatenate([sticky_routes(per_seq, STICK) for _ in range(4)])  # [tokens, layers, k]
        out.append({"pass_id": pass_id, "mode": 5 if verify else 2, "routes": routes, "per_seq": per_seq})
    return out


def write_dumps() -> None:
    mapping = physical_map()
    physical = mapping.shape[1]
    per_pass, per_token = [], []
    for p in passes():
        layer_major = to_physical(np.transpose(p["routes"], (1, 0, 2)))  # [layers, tokens, k]
        tokens = layer_major.shape[1]
        gpc = count(layer_major, physical)
        per_pass.append(dict(forward_pass_id=p["pass_id"], rank=0, gatherer_key="primary", global_physical_count=gpc))
        per_token.append(dict(
            forward_pass_id=p["pass_id"], rank=0, gatherer_key="primary",
            input_ids=rng.integers(0, 32000, tokens).tolist(), positions=list(range(100, 100 + tokens)),
            extend_seq_lens=[p["per_seq"]] * 4 if p["mode"] == 5 else None, forward_mode=p["mode"],
            topk_ids_of_layer=torch.from_numpy(layer_major.astype(np.int32)), misc_objects=[],
            global_physical_count=gpc,
        ))
    for name, records in (("sglang_per_pass", per_pass), ("sglang_per_token", per_token)):
        folder = HERE / name
        folder.mkdir(exist_ok=True)
        for old in folder.glob("*.pt"):
            old.unlink()
        torch.save({"records": records, "last_physical_to_logical_map": mapping},
                   folder / "expert_distribution_recorder_1764540000.0_0.pt")


def write_responses() -> None:
    prompt, output = 12, 40
    routes = sticky_routes(prompt + output - 1, STICK)
    buf = io.BytesIO()
    np.save(buf, routes.astype(np.uint8), allow_pickle=False)
    vllm = {
        "id": "chatcmpl-fixture", "object": "chat.completion", "model": "random-moe",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "..."}, "finish_reason": "length",
                     "routed_experts": base64.b64encode(buf.getvalue()).decode("ascii")}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output},
    }
    (HERE / "vllm_chat_response.json").write_text(json.dumps(vllm, indent=1))
    sglang = {
        "text": "...", "output_ids": list(range(output)),
        "meta_info": {"id": "fixture", "prompt_tokens": prompt, "completion_tokens": output,
                      "finish_reason": {"type": "length", "length": output},
                      "routed_experts": base64.b64encode(routes.astype(np.int32).tobytes()).decode("ascii")},
    }
    (HERE / "sglang_generate_response.json").write_text(json.dumps(sglang, indent=1))
    np.save(HERE / "routes_truth.npy", routes.astype(np.int16), allow_pickle=False)


if __name__ == "__main__":
    write_dumps()
    write_responses()
    print("fixtures written to", HERE)
