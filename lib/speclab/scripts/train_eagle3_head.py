"""Train a one-layer EAGLE-3 head for a Hugging Face Llama-style target on the CPU (or a GPU).

Runs inside the server venv (torch + transformers + safetensors); it must not import speclab.

    python train_eagle3_head.py train TARGET_DIR DATA_JSONL OUT_DIR [--seconds 480 ...]
    python train_eagle3_head.py evaluate TARGET_DIR HEAD_DIR DATA_JSONL OUT_JSON [--steps 3]

DATA_JSONL rows: {"id", "category", "prompt_token_ids", "output_token_ids"} - the served
model's own greedy answers, so the teacher is the model itself.

Pipeline (method notes: docs/eagle3.md):
1. features: one target forward per sample, keeping the residual stream entering layers
   low/mid/high (vLLM 0.32's default EAGLE-3 layers (2, L//2, L-3); Hugging Face
   `hidden_states[i]` is the same tensor) and the target's greedy next token at each row;
2. draft vocabulary: the `--draft-vocab` most frequent target tokens over answer rows, with
   `d2t[i] = target_id - i` and a boolean `t2d` over the target vocabulary (SpecForge's
   convention, which vLLM's loader reads);
3. training-time test: `--ttt` unrolled steps (eagle3_head.Eagle3Head.unrolled), cross-entropy
   against the target's greedy token at each step, step j weighted 0.8**j;
4. export: `config.json` + `model.safetensors` in the layout vLLM 0.32 loads.
`evaluate` runs a head offline over token ids and reports per-position acceptance
(the fraction of rows whose first i+1 drafted tokens all equal the target's greedy tokens).
Progress goes to stdout as ``speclab-progress {json}`` lines, which the parent draws as bars.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eagle3_head import Eagle3Head, HeadShape  # noqa: E402

STEP_DECAY = 0.8  # SpecForge's per-step loss weight


def progress(desc: str, done: float, total: float | None, unit: str) -> None:
    """One stdout line the parent turns into a progress bar (speclab.measure.progress's format)."""
    print("speclab-progress " + json.dumps({"desc": desc, "done": done, "total": total, "unit": unit}), flush=True)


def default_layers(num_layers: int) -> list[int]:
    """vLLM 0.32's default EAGLE-3 capture layers for Llama-style targets."""
    return [2, num_layers // 2, num_layers - 3]


def load_target(target_dir: str, threads: int):
    from transformers import AutoModelForCausalLM

    progress("loading the target model", 0, 1, "model")
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    model.eval()
    progress("loading the target model", 1, 1, "model")
    return model


def read_rows(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@torch.no_grad()
def features(model, rows: list[dict], layers: list[int], max_len: int) -> list[dict]:
    """Target features per sample: ids, aux states [n, 3h] (bf16), greedy next tokens."""
    out = []
    for done, row in enumerate(rows):
        progress("target features", done, len(rows), "sample")
        ids = (row["prompt_token_ids"] + row["output_token_ids"])[:max_len]
        x = torch.tensor([ids])
        res = model(input_ids=x, output_hidden_states=True)
        aux = torch.cat([res.hidden_states[i][0] for i in layers], dim=-1).to(torch.bfloat16)
        out.append({"id": row.get("id"), "category": row.get("category", "unknown"), "ids": torch.tensor(ids),
                    "aux": aux, "greedy": res.logits[0].argmax(-1), "prompt_len": len(row["prompt_token_ids"])})
    progress("target features", len(rows), len(rows), "sample")
    return out


def build_vocab(samples: list[dict], size: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Most frequent target tokens (as the target's greedy choice on answer rows) first."""
    counts: Counter[int] = Counter()
    for s in samples:
        counts.update(s["greedy"][max(s["prompt_len"] - 1, 0):].tolist())
    chosen = [t for t, _ in counts.most_common(size)]
    # fill up with the most frequent input tokens, then low ids, so the size is exact
    if len(chosen) < size:
        extra = Counter()
        for s in samples:
            extra.update(s["ids"].tolist())
        chosen += [t for t, _ in extra.most_common() if t not in set(chosen)][: size - len(chosen)]
    chosen += [t for t in range(vocab) if t not in set(chosen)][: size - len(chosen)]
    draft_ids = torch.tensor(sorted(chosen), dtype=torch.long)
    target_to_draft = torch.full((vocab,), -1, dtype=torch.long)
    target_to_draft[draft_ids] = torch.arange(len(draft_ids))
    return draft_ids, target_to_draft


def batch_tensors(batch: list[dict], embed: torch.Tensor, t2d_index: torch.Tensor, steps: int):
    """Padded inputs and per-step labels (-100 where no loss) for a list of samples."""
    n = max(len(s["ids"]) for s in batch) - 1
    h = embed.shape[1]
    aux = torch.zeros(len(batch), n, batch[0]["aux"].shape[1])
    embeds = torch.zeros(len(batch), n + steps - 1, h)
    labels = torch.full((steps, len(batch), n), -100, dtype=torch.long)
    for b, s in enumerate(batch):
        ids, length = s["ids"], len(s["ids"])
        rows = length - 1
        aux[b, :rows] = s["aux"][:rows].float()
        nxt = ids[1:]
        embeds[b, : len(nxt)] = embed[nxt]
        for j in range(steps):
            # row t, step j predicts position t+2+j; the teacher is the target's greedy token there
            t = torch.arange(rows)
            src = t + 1 + j
            ok = (src <= length - 1) & (t + 2 + j >= s["prompt_len"])
            lab = torch.full((rows,), -100, dtype=torch.long)
            mapped = t2d_index[s["greedy"][src[ok]]]
            lab[ok] = torch.where(mapped >= 0, mapped, torch.full_like(mapped, -100))
            labels[j, b, :rows] = lab
    return aux, embeds, labels


def head_shape(cfg: dict, draft_vocab: int) -> HeadShape:
    heads = int(cfg["num_attention_heads"])
    return HeadShape(hidden=int(cfg["hidden_size"]), heads=heads, kv_heads=int(cfg.get("num_key_value_heads", heads)),
                     head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
                     intermediate=int(cfg["intermediate_size"]), draft_vocab=draft_vocab,
                     target_hidden=int(cfg["hidden_size"]), rope_theta=float(cfg.get("rope_theta", 1e4)),
                     rms_eps=float(cfg.get("rms_norm_eps", 1e-5)))


def init_from_target(head: Eagle3Head, model, draft_ids: torch.Tensor) -> None:
    """Start near the target: its output rows for the draft vocabulary, its final norm, and
    fc reading the highest captured layer (a warm start, not a requirement of the method)."""
    with torch.no_grad():
        head.lm_head.weight.copy_(model.get_output_embeddings().weight[draft_ids])
        head.norm.weight.copy_(model.model.norm.weight)
        h = head.shape.hidden
        head.fc.weight.zero_()
        head.fc.weight[:, 2 * h:].copy_(torch.eye(h))


def summarise(results: list[dict]) -> dict:
    rows = sum(r["rows"] for r in results)
    steps = len(results[0]["accepted_per_pos"]) if results else 0
    per_pos = [sum(r["accepted_per_pos"][j] for r in results) / max(rows, 1) for j in range(steps)]
    return {"rows": rows, "per_position_acceptance": per_pos, "mean_acceptance_length": 1 + sum(per_pos)}


def save_head(head: Eagle3Head, out: Path, cfg: dict, draft_ids: torch.Tensor, layers: list[int], note: dict) -> None:
    from safetensors.torch import save_file

    vocab = int(cfg["vocab_size"])
    tensors = {k: v.to(torch.bfloat16) for k, v in head.state_dict_for_vllm().items()}
    tensors["d2t"] = (draft_ids - torch.arange(len(draft_ids))).to(torch.long)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[draft_ids] = True
    tensors["t2d"] = t2d
    s = head.shape
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
        "hidden_size": s.hidden, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim, "intermediate_size": s.intermediate, "vocab_size": vocab,
        "draft_vocab_size": s.draft_vocab, "target_hidden_size": s.target_hidden,
        "max_position_embeddings": int(cfg.get("max_position_embeddings", 2048)), "rope_theta": s.rope_theta,
        "rms_norm_eps": s.rms_eps, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": layers, "use_aux_hidden_state": True},
        "speclab_training": note,
    }
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))


def load_head(head_dir: str) -> tuple[Eagle3Head, torch.Tensor, list[int]]:
    from safetensors.torch import load_file

    cfg = json.loads((Path(head_dir) / "config.json").read_text())
    tensors = load_file(str(Path(head_dir) / "model.safetensors"))
    d2t = tensors.pop("d2t", None)
    tensors.pop("t2d", None)
    draft = int(cfg.get("draft_vocab_size") or cfg["vocab_size"])
    shape = HeadShape(hidden=cfg["hidden_size"], heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
                      head_dim=cfg["head_dim"], intermediate=cfg["intermediate_size"], draft_vocab=draft,
                      target_hidden=cfg.get("target_hidden_size", cfg["hidden_size"]),
                      rope_theta=cfg.get("rope_theta", 1e4), rms_eps=cfg.get("rms_norm_eps", 1e-5))
    head = Eagle3Head(shape)
    head.load_vllm_tensors(tensors)
    draft_ids = (d2t + torch.arange(draft)) if d2t is not None else torch.arange(draft)
    eagle = cfg.get("eagle_config") or {}
    layers = eagle.get("eagle_aux_hidden_state_layer_ids") or cfg.get("eagle_aux_hidden_state_layer_ids")
    return head, draft_ids, layers


def cmd_train(a: argparse.Namespace) -> None:
    torch.manual_seed(a.seed)
    started = time.perf_counter()
    cfg = json.loads((Path(a.target) / "config.json").read_text())
    layers = [int(x) for x in a.layers.split(",")] if a.layers else default_layers(int(cfg["num_hidden_layers"]))
    model = load_target(a.target, a.threads)
    rows = read_rows(a.data)
    samples = features(model, rows, layers, a.max_len)
    feature_s = time.perf_counter() - started
    held = max(1, int(len(samples) * a.eval_frac))
    gen = torch.Generator().manual_seed(a.seed)
    order = torch.randperm(len(samples), generator=gen).tolist()
    evals, trains = [samples[i] for i in order[:held]], [samples[i] for i in order[held:]]
    draft_ids, t2d_index = build_vocab(trains, a.draft_vocab, int(cfg["vocab_size"]))
    embed = model.get_input_embeddings().weight.detach()
    head = Eagle3Head(head_shape(cfg, len(draft_ids)))
    init_from_target(head, model, draft_ids)
    opt = torch.optim.AdamW(head.parameters(), lr=a.lr, weight_decay=0.0)
    trains.sort(key=lambda s: len(s["ids"]))
    batches = [trains[i : i + a.batch] for i in range(0, len(trains), a.batch)]
    total = a.epochs * len(batches)
    step = 0
    train_start = time.perf_counter()
    losses = []
    for epoch in range(a.epochs):
        perm = torch.randperm(len(batches), generator=gen).tolist()
        for bi in perm:
            elapsed = time.perf_counter() - train_start
            # a wall-clock budget: the bar counts its seconds, so the ETA is the budget's end
            progress("training (wall-clock budget)", int(min(elapsed, a.seconds)), int(a.seconds), "s")
            if elapsed > a.seconds:
                break
            lr = a.lr * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(1.0, elapsed / a.seconds, step / total)))
            for g in opt.param_groups:
                g["lr"] = lr
            aux, embeds, labels = batch_tensors(batches[bi], embed, t2d_index, a.ttt)
            logits = head.unrolled(aux, embeds, a.ttt)
            loss = sum((STEP_DECAY**j) * F.cross_entropy(lg.reshape(-1, lg.shape[-1]), labels[j].reshape(-1),
                                                         ignore_index=-100) for j, lg in enumerate(logits))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            losses.append(float(loss))
            step += 1
            if step % 25 == 0:
                print(f"step {step} epoch {epoch} loss {sum(losses[-25:]) / 25:.3f} {elapsed:.0f}s", flush=True)
        else:
            continue
        break
    train_s = time.perf_counter() - train_start
    progress("training (wall-clock budget)", int(a.seconds), int(a.seconds), "s")
    head.eval()
    held_out = summarise(chained_acceptance_all_rows(head, evals, embed, t2d_index, draft_ids, a.ttt,
                                                     desc="held-out check"))
    note = {"samples": len(samples), "held_out": len(evals), "steps": step, "epochs_done": round(step / max(len(batches), 1), 2),
            "ttt_steps": a.ttt, "draft_vocab": len(draft_ids), "layers": layers, "feature_s": round(feature_s, 1),
            "train_s": round(train_s, 1), "threads": a.threads, "final_loss": round(sum(losses[-25:]) / max(len(losses[-25:]), 1), 4),
            "held_out_per_position_acceptance": [round(x, 4) for x in held_out["per_position_acceptance"]]}
    save_head(head, Path(a.out), cfg, draft_ids, layers, note)
    (Path(a.out) / "training.json").write_text(json.dumps({**note, "losses": losses}, indent=1))
    print(json.dumps(note), flush=True)


def cmd_evaluate(a: argparse.Namespace) -> None:
    cfg = json.loads((Path(a.target) / "config.json").read_text())
    model = load_target(a.target, a.threads)
    head, draft_ids, layers = load_head(a.head)
    head.eval()
    layers = layers or default_layers(int(cfg["num_hidden_layers"]))
    rows = read_rows(a.data)
    samples = features(model, rows, layers, a.max_len)
    t2d_index = torch.full((int(cfg["vocab_size"]),), -1, dtype=torch.long)
    t2d_index[draft_ids] = torch.arange(len(draft_ids))
    # the teacher's token may fall outside the draft vocabulary: then no draft can match it,
    # so such rows count as rejections rather than being dropped
    results = chained_acceptance_all_rows(head, samples, model.get_input_embeddings().weight.detach(), t2d_index, draft_ids, a.steps)
    batches = [int(b) for b in a.time_batches.split(",") if b]
    Path(a.out).write_text(json.dumps({"samples": results, "overall": summarise(results),
                                       "draft_step_s": draft_step_times(head, batches)}, indent=1))
    print(json.dumps(summarise(results)))


@torch.no_grad()
def chained_acceptance_all_rows(head, samples, embed, t2d_index, draft_ids, steps: int,
                                desc: str = "drafting offline") -> list[dict]:
    """Per sample: answer rows drafted and, per position i, rows whose drafts 0..i all equal the
    target's greedy tokens (judged in target ids, so tokens outside the draft vocabulary count
    as rejections)."""
    results = []
    for done, s in enumerate(samples):
        progress(desc, done, len(samples), "sample")
        aux, embeds, _ = batch_tensors([s], embed, t2d_index, steps)
        logits = head.unrolled(aux, embeds, steps)
        greedy, length, plen = s["greedy"], len(s["ids"]), s["prompt_len"]
        t = torch.arange(length - 1)
        # rows vLLM drafts from: the last prompt token on (the first answer token is the
        # target's own), while the k-th drafted position is still inside the answer
        rows = (t + 1 >= plen) & (t + steps <= length - 1)
        ok = torch.ones_like(rows)
        per_pos = []
        for j in range(steps):
            drafted = draft_ids[logits[j][0].argmax(-1)]
            teacher = greedy[(t + 1 + j).clamp(max=length - 1)]
            ok = ok & (drafted == teacher)
            per_pos.append(int((ok & rows).sum()))
        results.append({"id": s["id"], "category": s["category"], "rows": int(rows.sum()), "accepted_per_pos": per_pos})
    progress(desc, len(samples), len(samples), "sample")
    return results


@torch.no_grad()
def draft_step_times(head: Eagle3Head, batches: list[int], repeats: int = 20) -> dict[str, float]:
    """Median seconds of one drafting step (one token per sequence) of the head's compute at
    each batch size: the layer over a 256-token context, the final norm and the draft lm_head.
    The serving engine's own per-step overhead is not in it."""
    import statistics

    s = head.shape
    out = {}
    for b in batches:
        aux = torch.randn(b, 256, s.num_aux * s.target_hidden)
        embeds = torch.randn(b, 256, s.hidden)
        g = head.fc(aux)
        positions = torch.arange(256)
        _, k0, v0 = head._qkv(embeds, g, positions)  # the cached keys and values
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            q, _, _ = head._qkv(embeds[:, -1:], g[:, -1:], positions[-1:])
            attn = F.scaled_dot_product_attention(q, k0, v0)
            head.lm_head(head.norm(head._finish(attn, g[:, -1:])))
            times.append(time.perf_counter() - start)
        out[str(b)] = statistics.median(times)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("target"), t.add_argument("data"), t.add_argument("out")
    t.add_argument("--seconds", type=float, default=480.0, help="training wall-clock budget")
    t.add_argument("--epochs", type=int, default=20)
    t.add_argument("--batch", type=int, default=4)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--ttt", type=int, default=3)
    t.add_argument("--draft-vocab", type=int, default=8192)
    t.add_argument("--layers", default="")
    t.add_argument("--max-len", type=int, default=1024)
    t.add_argument("--eval-frac", type=float, default=0.1)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("evaluate")
    e.add_argument("target"), e.add_argument("head"), e.add_argument("data"), e.add_argument("out")
    e.add_argument("--steps", type=int, default=3)
    e.add_argument("--max-len", type=int, default=2048)
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--time-batches", default="1,2,4,8,16", help="batch sizes to time one drafting step at")
    a = p.parse_args()
    cmd_train(a) if a.cmd == "train" else cmd_evaluate(a)


if __name__ == "__main__":
    main()
