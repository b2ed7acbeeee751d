"""Time one EAGLE-3 training step for a head of a given shape on whatever device is present.

Runs inside the server venv (torch only); it must not import speclab.
Usage: python time_eagle3_step.py CASES_JSON OUT_JSON
CASES_JSON is a list of objects with keys hidden, heads, kv_heads, head_dim, intermediate,
draft_vocab, target_hidden, seq_len, batch, ttt_steps (and optional name, repeats).
A step is what a trainer does per batch: embed lookup, target soft labels from the target's
final hidden state through its lm_head restricted to the draft vocabulary, the unrolled
forward, forward-KL losses weighted 0.8^j (SpecForge's default), backward, AdamW update.
Weights are random: the time of a step does not depend on their values.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eagle3_head import Eagle3Head, HeadShape  # noqa: E402


def _device() -> tuple[torch.device, str]:
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.cuda.get_device_name(0)
    return torch.device("cpu"), f"cpu: {platform.processor() or platform.machine()} x{torch.get_num_threads()} threads"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_case(case: dict, device: torch.device) -> dict:
    """Median wall time of `repeats` training steps after two warm-up steps."""
    shape = HeadShape(
        hidden=case["hidden"], heads=case["heads"], kv_heads=case["kv_heads"], head_dim=case["head_dim"],
        intermediate=case["intermediate"], draft_vocab=case["draft_vocab"], target_hidden=case["target_hidden"],
    )
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    b, n, steps = case["batch"], case["seq_len"], case["ttt_steps"]
    torch.manual_seed(0)
    head = Eagle3Head(shape).to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4)
    # frozen target pieces the trainer needs: its embedding table and its lm_head rows for
    # the draft vocabulary (used to turn the target's last hidden state into soft labels)
    vocab_rows = max(shape.draft_vocab, 1024)
    embed = torch.randn(vocab_rows, shape.hidden, device=device, dtype=dtype) * 0.02
    target_head = torch.randn(shape.draft_vocab, shape.target_hidden, device=device, dtype=dtype) * 0.02
    aux = torch.randn(b, n, 3 * shape.target_hidden, device=device, dtype=dtype)
    last = torch.randn(b, n + steps, shape.target_hidden, device=device, dtype=dtype)
    tokens = torch.randint(0, vocab_rows, (b, n + steps), device=device)

    def step() -> float:
        _sync(device)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = head.unrolled(aux, embed[tokens[:, : n + steps - 1]], steps)
        loss = torch.zeros((), device=device, dtype=torch.float32)
        for j, lg in enumerate(logits):
            with torch.no_grad():
                target = torch.softmax((last[:, j + 1 : j + 1 + n] @ target_head.T).float(), dim=-1)
            loss = loss + (0.8**j) * -(target * torch.log_softmax(lg.float(), dim=-1)).sum(-1).mean()
        loss.backward()
        opt.step()
        _sync(device)
        return time.perf_counter() - start

    for _ in range(2):
        step()
    times = [step() for _ in range(int(case.get("repeats", 5)))]
    params = sum(p.numel() for p in head.parameters())
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    return {
        **case,
        "dtype": str(dtype).replace("torch.", ""),
        "params": params,
        "step_s": statistics.median(times),
        "step_s_all": times,
        "tokens_per_step": b * n,
        "peak_mem_gib": peak,
    }


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    device, name = _device()
    results = []
    for done, case in enumerate(cases):
        # a line the parent draws as a bar (speclab.measure.progress's format)
        print("speclab-progress " + json.dumps({"desc": "timing training steps", "done": done,
                                                 "total": len(cases), "unit": "shape"}), flush=True)
        try:
            results.append(time_case(case, device))
        except torch.OutOfMemoryError as exc:  # report and go on with the next shape
            results.append({**case, "error": f"out of memory: {str(exc)[:200]}"})
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        print(json.dumps(results[-1]), flush=True)
    record = {
        "device": name,
        "device_type": device.type,
        "device_count": torch.cuda.device_count() if device.type == "cuda" else 0,
        "torch": torch.__version__,
        "host": platform.node(),
        "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cases": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
