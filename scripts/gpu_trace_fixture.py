"""Make the real GPU profiler fixture: a small MoE transformer decoding under torch.profiler.

Builds a scaled-down Qwen2-MoE (random weights, bf16, grouped-GEMM experts, SDPA attention)
with transformers, then profiles engine-like steps named the way vLLM's worker names them
(``execute_context_<n>(<tok>)_generation_<n>(<tok>)``): one prefill, plain decode steps,
"verify" steps that feed k+1 tokens per sequence (what speculative decoding does), and one
mixed step (a new prefill batched with running decodes). Sampling runs after each step in a
``gpu_model_runner: sample`` range, outside the step annotation, as vLLM does.

The trace is written as ``<out>/dp0_pp0_tp0_dcp0_ep0_rank0.<ns>.pt.trace.json.gz`` through
``torch.profiler.tensorboard_trace_handler``, the same writer vLLM uses.

Usage (on a CUDA machine): ``python scripts/gpu_trace_fixture.py --out /tmp/trace``.
``--device cpu`` runs the same steps on the CPU (a smoke test of this script only).
How the committed fixture was made: tests/data/traces/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

RANK_NAME = "dp0_pp0_tp0_dcp0_ep0_rank0"


def build_model(device: str, dtype: torch.dtype, experts: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, Qwen2MoeConfig

    config = Qwen2MoeConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=4,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=1024,
        num_experts=32,
        num_experts_per_tok=4,
        decoder_sparse_step=1,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    kwargs = {"attn_implementation": "sdpa"}
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, experts_implementation=experts, **kwargs)
    except (TypeError, ValueError) as exc:  # older transformers: no experts_implementation
        print(f"experts_implementation={experts!r} refused ({exc}); using the default", flush=True)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
    return model.to(device).eval()


def annotation(ctx_reqs: int, ctx_tokens: int, gen_reqs: int, gen_tokens: int) -> str:
    """vLLM's simple per-step annotation (vllm/v1/worker/gpu_worker.py)."""
    return f"execute_context_{ctx_reqs}({ctx_tokens})_generation_{gen_reqs}({gen_tokens})"


def maybe_init_distributed(device: str) -> bool:
    """A one-rank NCCL group: puts distributedInfo and an nccl:all_reduce op in the trace."""
    if device != "cuda":
        return False
    try:
        import torch.distributed as dist

        dist.init_process_group(
            "nccl", init_method="tcp://127.0.0.1:29555", world_size=1, rank=0,
            timeout=dt.timedelta(seconds=60),
        )
        return True
    except Exception as exc:  # noqa: BLE001 - the fixture is still useful without it
        print(f"no process group ({type(exc).__name__}: {exc})", flush=True)
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the trace")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=4, help="running sequences")
    parser.add_argument("--prompt-len", type=int, default=96)
    parser.add_argument("--decode-steps", type=int, default=6)
    parser.add_argument("--verify-k", default="1,3,7", help="draft lengths k of the verify steps")
    parser.add_argument("--verify-steps", type=int, default=3, help="verify steps per k")
    parser.add_argument("--experts", default="grouped_mm", help="transformers experts_implementation")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = args.device
    dtype = torch.bfloat16
    model = build_model(device, dtype, args.experts)
    distributed = maybe_init_distributed(device)
    from transformers import DynamicCache

    gen = torch.Generator(device=device).manual_seed(0)
    batch, vocab = args.batch, model.config.vocab_size

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def all_reduce_like_tp(hidden: torch.Tensor) -> None:
        if distributed:
            import torch.distributed as dist

            dist.all_reduce(hidden)

    def sample(logits: torch.Tensor) -> torch.Tensor:
        # greedy plus a top-k/top-p draw, as a sampler does, so sampling kernels appear
        with torch.profiler.record_function("gpu_model_runner: sample"):
            last = logits[:, -1, :].float()
            greedy = last.argmax(dim=-1)
            top = torch.topk(last, k=50, dim=-1)
            probs = torch.softmax(top.values, dim=-1)
            pick = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            drawn = top.indices.gather(-1, pick[:, None]).squeeze(-1)
            return torch.where(torch.rand(drawn.shape, device=device, generator=gen) < 0.5, greedy, drawn)

    def prefill(n: int, length: int) -> tuple[DynamicCache, torch.Tensor, int]:
        cache = DynamicCache()
        ids = torch.randint(0, vocab, (n, length), device=device, generator=gen)
        result = model(input_ids=ids, past_key_values=cache, use_cache=True)
        return cache, result.logits, length

    def forward(cache: DynamicCache, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        positions = torch.arange(pos, pos + tokens.shape[1], device=device)[None].expand(tokens.shape[0], -1)
        return model(input_ids=tokens, past_key_values=cache, position_ids=positions, use_cache=True).logits

    def run_steps(record: bool) -> list[dict]:
        steps: list[dict] = []
        label = annotation if record else (lambda *a: "warmup")

        def step(name: str) -> contextlib.AbstractContextManager:
            return torch.profiler.record_function(name)

        with step(label(batch, batch * args.prompt_len, 0, 0)):
            cache, logits, pos = prefill(batch, args.prompt_len)
            all_reduce_like_tp(logits[:, -1, :64].contiguous())
        steps.append({"kind": "prefill", "tokens": batch * args.prompt_len})
        token = sample(logits).tolist()
        plan = [1] * args.decode_steps
        for k in (int(x) for x in args.verify_k.split(",") if x.strip()):
            plan += [k + 1] * args.verify_steps
        for width in plan:
            with step(label(0, 0, batch, batch * width)):
                drafts = torch.randint(0, vocab, (batch, width - 1), device=device, generator=gen)
                tokens = torch.cat([torch.tensor(token, device=device)[:, None], drafts], dim=1)
                logits = forward(cache, tokens, pos)
                all_reduce_like_tp(logits[:, -1, :64].contiguous())
            steps.append({"kind": "decode", "tokens": batch * width})
            token = sample(logits).tolist()
            pos += width
            # keep one accepted token per sequence, as a rejection of every draft would
            if width > 1:
                cache.crop(-(width - 1))
                pos = pos - width + 1
        # mixed: a new request's prefill batched with the running decodes in one step
        with step(label(1, 64, batch, batch)):
            new_cache, new_logits, _ = prefill(1, 64)
            logits = forward(cache, torch.tensor(token, device=device)[:, None], pos)
        steps.append({"kind": "mixed", "tokens": 64 + batch})
        sample(logits).tolist()
        sample(new_logits).tolist()
        sync()
        return steps

    with torch.inference_mode():
        for _ in range(2):  # warm-up: cuBLAS/cutlass heuristics, allocator, lazy init
            run_steps(record=False)
        sync()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        handler = torch.profiler.tensorboard_trace_handler(str(out), worker_name=RANK_NAME, use_gzip=True)
        started = time.perf_counter()
        with torch.profiler.profile(activities=activities, record_shapes=False, with_stack=False,
                                    on_trace_ready=handler) as prof:
            steps = run_steps(record=True)
        elapsed = time.perf_counter() - started

    kernels = prof.key_averages()
    top = sorted(kernels, key=lambda e: getattr(e, "device_time_total", 0.0) or 0.0, reverse=True)[:40]
    info = {
        "made_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "transformers": __import__("transformers").__version__,
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "distributed": distributed,
        "args": vars(args),
        "steps": steps,
        "profile_wall_s": round(elapsed, 3),
        "top_ops_by_device_time": [
            {"name": e.key, "device_time_total_us": getattr(e, "device_time_total", None), "count": e.count}
            for e in top
        ],
        "traces": sorted(p.name for p in out.glob("*.pt.trace.json*")),
    }
    (out / "fixture_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps({k: info[k] for k in ("device", "torch", "transformers", "experts_implementation",
                                           "distributed", "traces", "profile_wall_s")}, indent=1))
    if distributed:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
