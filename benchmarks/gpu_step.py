"""Time one decode or verify step of a whole decoder stack, part by part, on a GPU.

    python benchmarks/gpu_step.py --shapes dense-8b,moe-30b-a3b,kimi-k2.5-tp8-rank --out-dir OUT

Stand-alone on purpose (torch, Triton and the standard library) so it runs on any CUDA box as
one file; ``speclab.predict.stepparts`` reads its JSON back. On a machine without a GPU it runs
with ``--device cpu --tiny`` (a scaled-down stack, torch attention, no graphs): a check that the
stack is built and timed as described, never a figure about a GPU.

What one point is: ``B`` sequences, each with ``context`` tokens already in its own KV cache,
each pushing ``n`` new tokens through the stack in one step (``n = 1``: a decode step; ``n > 1``:
verifying ``n - 1`` draft tokens plus the bonus position, logits for every one of them as an
engine computes them). ``baseline_slope``'s stand-in for that step is a decode step of ``B * n``
sequences, ``T(B*n, 1)``, timed at the same context; the grid times both.

How it is timed: random bf16 weights, the whole stack captured into one CUDA graph and
replayed (CUDA events, median of repeats). Each part is captured and timed again on its own, over
every layer with the same tensors: ``attention`` (KV-cache writes, one split-KV attention kernel
for decode and verify alike, written here in Triton, and the packing around it), ``moe`` (top-k,
sorting tokens by expert, grouped expert GEMMs with ``torch._grouped_mm``, which reads only the
experts a step touches, the weighted combine), ``dense`` (every other GEMM: projections, dense
MLPs, a shared expert, the router, the LM head). ``other`` is the full step minus those three:
norms, rotary embedding, activations, residual adds, sampling, and the gaps between kernels.

CUDA-graph mode (``--graph-mode full,piecewise``, docs/gpu-step.md): the whole step timed on the
same tensors as one captured graph (vLLM's FULL decode graphs) and split at every layer's
attention op (vLLM's PIECEWISE mode, which dynamic speculative decoding forces): ``layers + 1``
captured pieces, the attention op (cache writes, packing, the kernels, unpacking; for MLA also
the W_UK / W_UV products, which vLLM's MLA op holds) launched eagerly from Python between them.
The modes alternate rep by rep; ``extra_ms`` is the median paired difference. Written to
``gpu-graph-mode-<shape>.json`` (no stand-in points, no parts). On a CPU every mode runs eagerly,
so piecewise equals eager and full, and the file says so.

Regimes it does not cover: one GPU, so no all-reduce (a TP rank's communication is not in these
numbers); bf16 everywhere (a deployment serving INT4 or FP8 experts reads fewer bytes per expert);
routing from a random router over random activations, so a verify step's tokens route
independently (real adjacent tokens share experts: an upper bound on distinct experts).

Caches: a model's layers cycle through ``weight_sets`` distinct weight sets (every layer distinct
where memory allows); the KV caches of layers sit in different memory, so no layer finds another
layer's weights or cache in the 50 MB L2 (the weights read in between flush it anyway).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU runs use torch attention
    triton = None
    tl = None

# --------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class Shape:
    """A decoder stack as one GPU holds it."""

    name: str
    layers: int
    hidden: int
    vocab: int  # the LM head's rows on this GPU
    attention: str  # "gqa" | "mla"
    heads: int  # query heads on this GPU
    kv_heads: int = 0  # gqa
    head_dim: int = 128  # gqa
    q_lora: int = 0  # mla
    kv_lora: int = 0
    nope_dim: int = 0
    rope_dim: int = 0
    v_head_dim: int = 0
    dense_ffn: int = 0  # intermediate size of a dense MLP layer
    experts: int = 0  # routed experts (0: every layer dense)
    top_k: int = 0
    expert_ffn: int = 0  # one expert's intermediate size on this GPU
    shared_ffn: int = 0  # shared expert's intermediate size on this GPU
    first_dense: int = 0  # leading dense layers of a MoE model
    tp: int = 1  # the tensor-parallel degree this GPU is one rank of
    source: str = ""


# From the models' config.json on Hugging Face. meta-llama/Llama-3.1-8B: 32 layers, hidden 4096,
# 32 heads, 8 KV heads, intermediate 14336, vocab 128256. Qwen/Qwen3-30B-A3B: 48 layers, hidden
# 2048, 32 heads, 4 KV heads, head_dim 128, 128 experts, top-8, moe_intermediate 768, vocab 151936.
# moonshotai/Kimi-K2.5 (text model DeepSeek-V3-shaped): 61 layers, hidden 7168, 64 heads, MLA with
# q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128; 384 experts, top-8,
# moe_intermediate 2048, 1 shared expert, first_k_dense_replace 1 (intermediate 18432), vocab
# 163840. One rank of TP 8 as vLLM splits it without expert parallelism: 8 of the 64 heads, every
# expert's intermediate split 8 ways (256), the shared expert and dense MLP likewise, the LM head
# split by vocabulary; q_a / kv_a projections and the router are replicated on every rank.
SHAPES: dict[str, Shape] = {
    "dense-8b": Shape("dense-8b", layers=32, hidden=4096, vocab=128256, attention="gqa", heads=32,
                      kv_heads=8, head_dim=128, dense_ffn=14336, source="meta-llama/Llama-3.1-8B"),
    "moe-30b-a3b": Shape("moe-30b-a3b", layers=48, hidden=2048, vocab=151936, attention="gqa", heads=32,
                         kv_heads=4, head_dim=128, experts=128, top_k=8, expert_ffn=768,
                         source="Qwen/Qwen3-30B-A3B"),
    "kimi-k2.5-tp8-rank": Shape("kimi-k2.5-tp8-rank", layers=61, hidden=7168, vocab=163840 // 8, attention="mla",
                                heads=64 // 8, q_lora=1536, kv_lora=512, nope_dim=128, rope_dim=64,
                                v_head_dim=128, dense_ffn=18432 // 8, experts=384, top_k=8,
                                expert_ffn=2048 // 8, shared_ffn=2048 // 8, first_dense=1, tp=8,
                                source="moonshotai/Kimi-K2.5, one rank of TP 8"),
}


def tiny(shape: Shape) -> Shape:
    """The same stack scaled down for a CPU check (dimensions / 16, 3 layers)."""
    def d(v: int, low: int = 16) -> int:
        return max(v // 16, low) if v else 0
    return replace(shape, name=f"{shape.name}/tiny", layers=3, hidden=d(shape.hidden, 64), vocab=d(shape.vocab, 64),
                   heads=max(shape.heads // 4, 2), kv_heads=max(shape.kv_heads // 4, 1) if shape.kv_heads else 0,
                   head_dim=32 if shape.attention == "gqa" else 0, q_lora=d(shape.q_lora), kv_lora=d(shape.kv_lora, 32),
                   nope_dim=d(shape.nope_dim), rope_dim=d(shape.rope_dim), v_head_dim=d(shape.v_head_dim),
                   dense_ffn=d(shape.dense_ffn), experts=max(shape.experts // 8, 8) if shape.experts else 0,
                   expert_ffn=d(shape.expert_ffn), shared_ffn=d(shape.shared_ffn),
                   first_dense=min(shape.first_dense, 1))


# --------------------------------------------------------------------------- attention (Triton)

if triton is not None:

    @triton.jit
    def _split_kv_attention(
        Q, K, V, Opart, Mpart, Lpart,
        sq_b, sq_h, sq_m, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n,
        so_b, so_h, so_s, so_m, sm_b, sm_h, sm_s,
        kv_heads, ctx, n_tok, rows, split_len, sm_scale,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, DPE: tl.constexpr, DV: tl.constexpr,
    ):
        """One (sequence, KV head, KV split, row block): online softmax over its share of the
        sequence's cache. Rows are (query head in the group, token) pairs, row = head * n + token;
        token t sees the cache up to position ctx + t (its own and earlier new tokens)."""
        pid_bh = tl.program_id(0)
        pid_s = tl.program_id(1)
        pid_m = tl.program_id(2)
        b = pid_bh // kv_heads
        h = pid_bh % kv_heads
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, D)
        offs_v = tl.arange(0, DV)
        row_ok = offs_m < rows
        tok = offs_m % n_tok
        q_base = Q + b * sq_b + h * sq_h
        q = tl.load(q_base + offs_m[:, None] * sq_m + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        if DPE > 0:
            offs_pe = D + tl.arange(0, DPE)
            qpe = tl.load(q_base + offs_m[:, None] * sq_m + offs_pe[None, :], mask=row_ok[:, None], other=0.0)
        kv_len = ctx + n_tok
        start = pid_s * split_len
        end = tl.minimum(start + split_len, kv_len)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, DV], tl.float32)
        k_base = K + b * sk_b + h * sk_h
        v_base = V + b * sv_b + h * sv_h
        for n0 in range(start, end, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            n_ok = offs_n < end
            k = tl.load(k_base + offs_n[None, :] * sk_n + offs_d[:, None], mask=n_ok[None, :], other=0.0)
            qk = tl.dot(q, k)
            if DPE > 0:
                kpe = tl.load(k_base + offs_n[None, :] * sk_n + offs_pe[:, None], mask=n_ok[None, :], other=0.0)
                qk += tl.dot(qpe, kpe)
            qk = qk * sm_scale
            visible = n_ok[None, :] & (offs_n[None, :] <= ctx + tok[:, None])
            qk = tl.where(visible, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(qk - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            v = tl.load(v_base + offs_n[:, None] * sv_n + offs_v[None, :], mask=n_ok[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        o_base = Opart + b * so_b + h * so_h + pid_s * so_s
        tl.store(o_base + offs_m[:, None] * so_m + offs_v[None, :], acc, mask=row_ok[:, None])
        ml = b * sm_b + h * sm_h + pid_s * sm_s + offs_m
        tl.store(Mpart + ml, m_i, mask=row_ok)
        tl.store(Lpart + ml, l_i, mask=row_ok)

    @triton.jit
    def _combine_splits(
        Opart, Mpart, Lpart, Out,
        so_b, so_h, so_s, so_m, sm_b, sm_h, sm_s, sout_b, sout_h, sout_m,
        kv_heads, rows, splits,
        BLOCK_M: tl.constexpr, DV: tl.constexpr,
    ):
        """The splits' partial results merged (log-sum-exp weights) and normalised."""
        pid_bh = tl.program_id(0)
        pid_m = tl.program_id(1)
        b = pid_bh // kv_heads
        h = pid_bh % kv_heads
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_v = tl.arange(0, DV)
        row_ok = offs_m < rows
        m_base = Mpart + b * sm_b + h * sm_h + offs_m
        l_base = Lpart + b * sm_b + h * sm_h + offs_m
        m_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
        for s in range(0, splits):
            m_max = tl.maximum(m_max, tl.load(m_base + s * sm_s, mask=row_ok, other=float("-inf")))
        m_max = tl.where(m_max == float("-inf"), 0.0, m_max)
        acc = tl.zeros([BLOCK_M, DV], tl.float32)
        denom = tl.zeros([BLOCK_M], tl.float32)
        o_base = Opart + b * so_b + h * so_h
        for s in range(0, splits):
            w = tl.exp(tl.load(m_base + s * sm_s, mask=row_ok, other=float("-inf")) - m_max)
            denom += w * tl.load(l_base + s * sm_s, mask=row_ok, other=0.0)
            part = tl.load(o_base + s * so_s + offs_m[:, None] * so_m + offs_v[None, :], mask=row_ok[:, None],
                           other=0.0)
            acc += w[:, None] * part
        out = acc / tl.where(denom > 0, denom, 1.0)[:, None]
        tl.store(Out + b * sout_b + h * sout_h + offs_m[:, None] * sout_m + offs_v[None, :],
                 out.to(Out.dtype.element_ty), mask=row_ok[:, None])


def _next_pow2(v: int) -> int:
    return 1 << max(int(v) - 1, 0).bit_length()


class Attention:
    """Decode and verify attention over per-sequence KV caches: one kernel, one split rule.

    ``q``: [B, kv_heads, rows, Dq] with rows = heads per KV head x n (row = head * n + token);
    ``k``/``v``: [B, kv_heads, >= ctx + n, D] views of the caches. ``Dq = d + dpe`` (MLA: the
    512-wide latent plus the 64-wide rotary part; GQA: ``dpe = 0``)."""

    def __init__(self, batch: int, kv_heads: int, rows: int, n_tok: int, ctx: int, d: int, dpe: int, dv: int,
                 scale: float, device: torch.device, sms: int, use_triton: bool) -> None:
        self.batch, self.kv_heads, self.rows, self.n_tok, self.ctx = batch, kv_heads, rows, n_tok, ctx
        self.d, self.dpe, self.dv, self.scale, self.use_triton = d, dpe, dv, scale, use_triton
        wide = d + dpe > 256
        self.block_m = 16 if wide else min(max(_next_pow2(rows), 16), 64)
        self.block_n = 32 if wide else 64
        self.row_blocks = math.ceil(rows / self.block_m)
        kv_len = ctx + n_tok
        # Split the sequence's cache so the grid covers the GPU twice (flash-decoding), never
        # into pieces smaller than 4 key blocks; the same rule for decode and verify.
        base = batch * kv_heads * self.row_blocks
        splits = max(1, min(math.ceil(2 * sms / base), math.ceil(kv_len / (4 * self.block_n))))
        self.split_len = math.ceil(math.ceil(kv_len / splits) / self.block_n) * self.block_n
        self.splits = math.ceil(kv_len / self.split_len)
        if use_triton:
            self.o_part = torch.empty(batch, kv_heads, self.splits, rows, dv, device=device, dtype=torch.float32)
            self.m_part = torch.empty(batch, kv_heads, self.splits, rows, device=device, dtype=torch.float32)
            self.l_part = torch.empty_like(self.m_part)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
        if not self.use_triton:
            out.copy_(reference_attention(q, k, v, self.ctx, self.n_tok, self.scale))
            return
        grid = (self.batch * self.kv_heads, self.splits, self.row_blocks)
        _split_kv_attention[grid](
            q, k, v, self.o_part, self.m_part, self.l_part,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            self.o_part.stride(0), self.o_part.stride(1), self.o_part.stride(2), self.o_part.stride(3),
            self.m_part.stride(0), self.m_part.stride(1), self.m_part.stride(2),
            self.kv_heads, self.ctx, self.n_tok, self.rows, self.split_len, self.scale,
            BLOCK_M=self.block_m, BLOCK_N=self.block_n, D=self.d, DPE=self.dpe, DV=self.dv,
            num_warps=4, num_stages=2)
        _combine_splits[(self.batch * self.kv_heads, self.row_blocks)](
            self.o_part, self.m_part, self.l_part, out,
            self.o_part.stride(0), self.o_part.stride(1), self.o_part.stride(2), self.o_part.stride(3),
            self.m_part.stride(0), self.m_part.stride(1), self.m_part.stride(2),
            out.stride(0), out.stride(1), out.stride(2),
            self.kv_heads, self.rows, self.splits, BLOCK_M=self.block_m, DV=self.dv, num_warps=4)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: int, n_tok: int,
                        scale: float) -> torch.Tensor:
    """The same attention in float32 torch (the check, and the CPU path)."""
    kv_len = ctx + n_tok
    dq = q.shape[-1]
    scores = q.float() @ k[:, :, :kv_len, :dq].float().transpose(-1, -2) * scale
    tok = torch.arange(q.shape[2], device=q.device) % n_tok
    visible = torch.arange(kv_len, device=q.device)[None, :] <= ctx + tok[:, None]
    scores = scores.masked_fill(~visible, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v[:, :, :kv_len].float()).to(q.dtype)


# --------------------------------------------------------------------------- the stack


def _rand(*shape: int, device: torch.device, scale: float = 0.02) -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=torch.bfloat16) * scale


class Weights:
    """Random bf16 weights of ``sets`` distinct layers (layers cycle through them)."""

    def __init__(self, s: Shape, sets: int, device: torch.device) -> None:
        self.sets = []
        for _ in range(sets):
            w: dict[str, torch.Tensor] = {"n1": torch.ones(s.hidden, device=device, dtype=torch.bfloat16),
                                          "n2": torch.ones(s.hidden, device=device, dtype=torch.bfloat16)}
            if s.attention == "gqa":
                w["qkv"] = _rand(s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim, device=device)
                w["o"] = _rand(s.heads * s.head_dim, s.hidden, device=device)
            else:
                w["qkv_a"] = _rand(s.hidden, s.q_lora + s.kv_lora + s.rope_dim, device=device)
                w["q_b"] = _rand(s.q_lora, s.heads * (s.nope_dim + s.rope_dim), device=device)
                w["uk"] = _rand(s.heads, s.nope_dim, s.kv_lora, device=device)
                w["uv"] = _rand(s.heads, s.kv_lora, s.v_head_dim, device=device)
                w["o"] = _rand(s.heads * s.v_head_dim, s.hidden, device=device)
                w["nq"] = torch.ones(s.q_lora, device=device, dtype=torch.bfloat16)
                w["nkv"] = torch.ones(s.kv_lora, device=device, dtype=torch.bfloat16)
            if s.experts:
                w["router"] = _rand(s.hidden, s.experts, device=device)
                # [experts, N, K]: passed transposed, K-major, as torch._grouped_mm's tests do
                w["e_gu"] = _rand(s.experts, 2 * s.expert_ffn, s.hidden, device=device)
                w["e_d"] = _rand(s.experts, s.hidden, s.expert_ffn, device=device)
                if s.shared_ffn:
                    w["s_gu"] = _rand(s.hidden, 2 * s.shared_ffn, device=device)
                    w["s_d"] = _rand(s.shared_ffn, s.hidden, device=device)
            else:
                w["gu"] = _rand(s.hidden, 2 * s.dense_ffn, device=device)
                w["d"] = _rand(s.dense_ffn, s.hidden, device=device)
            self.sets.append(w)
        self.dense_first: list[dict[str, torch.Tensor]] = []
        if s.experts and s.first_dense:
            self.dense_first = [{"gu": _rand(s.hidden, 2 * s.dense_ffn, device=device),
                                 "d": _rand(s.dense_ffn, s.hidden, device=device)} for _ in range(s.first_dense)]
        self.lm_head = _rand(s.hidden, s.vocab, device=device)
        self.final_norm = torch.ones(s.hidden, device=device, dtype=torch.bfloat16)

    @staticmethod
    def layer_bytes(s: Shape) -> int:
        if s.attention == "gqa":
            attn = s.hidden * (s.heads + 2 * s.kv_heads) * s.head_dim + s.heads * s.head_dim * s.hidden
        else:
            attn = (s.hidden * (s.q_lora + s.kv_lora + s.rope_dim) + s.q_lora * s.heads * (s.nope_dim + s.rope_dim)
                    + s.heads * s.kv_lora * (s.nope_dim + s.v_head_dim) + s.heads * s.v_head_dim * s.hidden)
        ffn = (s.hidden * s.experts + 3 * s.experts * s.hidden * s.expert_ffn + 3 * s.hidden * s.shared_ffn
               if s.experts else 3 * s.hidden * s.dense_ffn)
        return 2 * (attn + ffn)


class KVCache:
    """Two slots of per-sequence caches, ``capacity`` sequences x ``max_len`` positions each;
    layer ``i`` uses slot ``i % 2`` at a sequence offset of its own where the batch leaves room."""

    def __init__(self, s: Shape, capacity: int, max_len: int, device: torch.device) -> None:
        self.capacity = capacity
        if s.attention == "gqa":
            self.k = [_rand(capacity, s.kv_heads, max_len, s.head_dim, device=device, scale=1.0) for _ in range(2)]
            self.v = [_rand(capacity, s.kv_heads, max_len, s.head_dim, device=device, scale=1.0) for _ in range(2)]
        else:  # MLA: one latent cache [c_kv | k_pe], its first kv_lora columns are V
            self.k = [_rand(capacity, 1, max_len, s.kv_lora + s.rope_dim, device=device, scale=1.0)
                      for _ in range(2)]
            self.v = self.k

    def views(self, layer: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        regions = max(self.capacity // batch, 1)
        offset = ((layer // 2) % regions) * batch
        slot = layer % 2
        return self.k[slot][offset:offset + batch], self.v[slot][offset:offset + batch]


PARTS = ("attention", "moe", "dense")
ALL = frozenset({"other", *PARTS})


class Step:
    """One step of ``batch`` sequences x ``n`` tokens at ``ctx`` context, as static tensors, so
    that :meth:`run` can be captured in a CUDA graph; ``parts`` picks the kernels that run."""

    def __init__(self, s: Shape, w: Weights, kv: KVCache, batch: int, n: int, ctx: int, device: torch.device,
                 sms: int, use_triton: bool) -> None:
        self.s, self.w, self.kv, self.batch, self.n, self.ctx = s, w, kv, batch, n, ctx
        t = batch * n
        self.tokens = t
        self.x0 = _rand(t, s.hidden, device=device, scale=1.0)
        rope = s.head_dim if s.attention == "gqa" else s.rope_dim
        self.cos = _rand(t, 1, rope // 2, device=device, scale=1.0)
        self.sin = _rand(t, 1, rope // 2, device=device, scale=1.0)
        if s.attention == "gqa":
            group = s.heads // s.kv_heads
            rows, d, dpe, dv, kvh = group * n, s.head_dim, 0, s.head_dim, s.kv_heads
            scale = 1.0 / math.sqrt(s.head_dim)
            self.qkv = _rand(t, (s.heads + 2 * s.kv_heads) * s.head_dim, device=device, scale=1.0)
            self.attn_flat = _rand(t, s.heads * s.head_dim, device=device, scale=1.0)
        else:
            rows, d, dpe, dv, kvh = s.heads * n, s.kv_lora, s.rope_dim, s.kv_lora, 1
            scale = 1.0 / math.sqrt(s.nope_dim + s.rope_dim)
            self.qkv = _rand(t, s.q_lora + s.kv_lora + s.rope_dim, device=device, scale=1.0)
            self.qb = _rand(t, s.heads * (s.nope_dim + s.rope_dim), device=device, scale=1.0)
            self.q_lat = _rand(s.heads, t, s.kv_lora, device=device, scale=1.0)
            self.o_lat = _rand(s.heads, t, s.kv_lora, device=device, scale=1.0)
            self.attn_flat = _rand(t, s.heads * s.v_head_dim, device=device, scale=1.0)
        self.q_pack = _rand(batch, kvh, rows, d + dpe, device=device, scale=1.0)
        self.o_pack = _rand(batch, kvh, rows, dv, device=device, scale=1.0)
        self.attn = Attention(batch, kvh, rows, n, ctx, d, dpe, dv, scale, device, sms, use_triton)
        self.proj = _rand(t, s.hidden, device=device, scale=1.0)
        ffn = max(s.dense_ffn, s.expert_ffn, s.shared_ffn)
        self.gu = _rand(t, 2 * ffn, device=device, scale=1.0)
        self.act = _rand(t, ffn, device=device, scale=1.0)
        if s.experts:
            self.logits = _rand(t, s.experts, device=device, scale=1.0)
            self.counts = torch.zeros(s.layers, s.experts, device=device, dtype=torch.int32)
            self.ones = torch.ones(t * s.top_k, device=device, dtype=torch.int32)
        self.lm = _rand(t, s.vocab, device=device, scale=1.0)

    # ---------------------------------------------------------------- pieces

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * self.cos - x2 * self.sin, x2 * self.cos + x1 * self.sin], dim=-1)

    def _gqa(self, layer: int, w: dict[str, torch.Tensor], h: torch.Tensor, on: frozenset[str]) -> torch.Tensor:
        q, k, v = self._gqa_pre(w, h, on)
        if "attention" in on:
            self._gqa_attend(layer, q, k, v)
        return self.attn_flat @ w["o"] if "dense" in on else self.proj

    def _gqa_pre(self, w: dict[str, torch.Tensor], h: torch.Tensor,
                 on: frozenset[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """QKV projection and rotary embedding (before the attention op)."""
        s, t = self.s, self.tokens
        qkv = h @ w["qkv"] if "dense" in on else self.qkv
        q = qkv[:, : s.heads * s.head_dim].view(t, s.heads, s.head_dim)
        k = qkv[:, s.heads * s.head_dim:(s.heads + s.kv_heads) * s.head_dim].view(t, s.kv_heads, s.head_dim)
        v = qkv[:, (s.heads + s.kv_heads) * s.head_dim:].view(t, s.kv_heads, s.head_dim)
        if "other" in on:
            q, k = self._rope(q), self._rope(k)
        return q, k, v

    def _gqa_attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """The attention op: KV-cache writes, packing, the split-KV kernel, unpacking."""
        s, b, n = self.s, self.batch, self.n
        kc, vc = self.kv.views(layer, b)
        kc[:, :, self.ctx:self.ctx + n].copy_(k.reshape(b, n, s.kv_heads, s.head_dim).transpose(1, 2))
        vc[:, :, self.ctx:self.ctx + n].copy_(v.reshape(b, n, s.kv_heads, s.head_dim).transpose(1, 2))
        group = s.heads // s.kv_heads
        self.q_pack.view(b, s.kv_heads, group, n, s.head_dim).copy_(
            q.reshape(b, n, s.kv_heads, group, s.head_dim).permute(0, 2, 3, 1, 4))
        self.attn(self.q_pack, kc, vc, self.o_pack)
        self.attn_flat.view(b, n, s.kv_heads, group, s.head_dim).copy_(
            self.o_pack.view(b, s.kv_heads, group, n, s.head_dim).permute(0, 3, 1, 2, 4))

    def _mla(self, layer: int, w: dict[str, torch.Tensor], h: torch.Tensor, on: frozenset[str]) -> torch.Tensor:
        c_kv, k_pe, q_pe, _ = self._mla_pre(w, h, on, absorb=True)
        if "attention" in on:
            self._mla_attend(layer, c_kv, k_pe, q_pe)
        if "dense" in on:
            self._mla_absorb_o(w)
            return self.attn_flat @ w["o"]
        return self.proj

    def _mla_pre(self, w: dict[str, torch.Tensor], h: torch.Tensor, on: frozenset[str],
                 absorb: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Down and up projections, norms, rotary embedding; with ``absorb`` the W_UK product too
        (piecewise mode leaves it to the attention op, as vLLM's MLA op holds it)."""
        s, t = self.s, self.tokens
        heads, lat, pe = s.heads, s.kv_lora, s.rope_dim
        qkv = h @ w["qkv_a"] if "dense" in on else self.qkv
        q_a, c_kv, k_pe = qkv[:, : s.q_lora], qkv[:, s.q_lora:s.q_lora + lat], qkv[:, s.q_lora + lat:]
        if "other" in on:
            q_a = F.rms_norm(q_a, (s.q_lora,), w["nq"])
            c_kv = F.rms_norm(c_kv, (lat,), w["nkv"])
            k_pe = self._rope(k_pe.reshape(t, 1, pe)).reshape(t, pe)
        if "dense" in on:
            qb = (q_a @ w["q_b"]).view(t, heads, s.nope_dim + pe)
            if absorb:
                self._mla_absorb_q(w, qb)
        else:
            qb = self.qb.view(t, heads, s.nope_dim + pe)
        q_pe = qb[:, :, s.nope_dim:]
        if "other" in on:
            q_pe = self._rope(q_pe)
        return c_kv, k_pe, q_pe, qb

    def _mla_absorb_q(self, w: dict[str, torch.Tensor], qb: torch.Tensor) -> None:
        torch.bmm(qb[:, :, : self.s.nope_dim].transpose(0, 1), w["uk"], out=self.q_lat)  # absorb W_UK

    def _mla_attend(self, layer: int, c_kv: torch.Tensor, k_pe: torch.Tensor, q_pe: torch.Tensor) -> None:
        """The latent cache write, packing, the split-KV kernel over the latent cache, unpacking."""
        s, b, n = self.s, self.batch, self.n
        heads, lat, pe = s.heads, s.kv_lora, s.rope_dim
        kc, _ = self.kv.views(layer, b)
        kc[:, 0, self.ctx:self.ctx + n, :lat].copy_(c_kv.reshape(b, n, lat))
        kc[:, 0, self.ctx:self.ctx + n, lat:].copy_(k_pe.reshape(b, n, pe))
        packed = self.q_pack.view(b, heads, n, lat + pe)
        packed[..., :lat].copy_(self.q_lat.view(heads, b, n, lat).transpose(0, 1))
        packed[..., lat:].copy_(q_pe.reshape(b, n, heads, pe).transpose(1, 2))
        self.attn(self.q_pack, kc, kc[..., :lat], self.o_pack)
        self.o_lat.view(heads, b, n, lat).copy_(self.o_pack.view(b, heads, n, lat).transpose(0, 1))

    def _mla_absorb_o(self, w: dict[str, torch.Tensor]) -> None:
        s = self.s
        out = torch.bmm(self.o_lat, w["uv"])  # [heads, t, v_head]: absorb W_UV
        self.attn_flat.view(self.tokens, s.heads, s.v_head_dim).copy_(out.transpose(0, 1))

    def _mlp(self, w: dict[str, torch.Tensor], h: torch.Tensor, on: frozenset[str], ffn: int, gu: str, d: str) -> torch.Tensor:
        t = self.tokens
        g = h @ w[gu] if "dense" in on else self.gu[:, : 2 * ffn]
        a = F.silu(g[:, :ffn]) * g[:, ffn:] if "other" in on else self.act[:, :ffn]
        return a @ w[d] if "dense" in on else self.proj[:t]

    def _moe(self, layer: int, w: dict[str, torch.Tensor], h: torch.Tensor, on: frozenset[str]) -> torch.Tensor:
        s, t = self.s, self.tokens
        logits = h @ w["router"] if "dense" in on else self.logits
        if "moe" in on:
            top, ids = torch.topk(logits.float(), s.top_k, dim=-1)
            weights = torch.softmax(top, dim=-1)
            flat = ids.view(-1)
            order = torch.argsort(flat, stable=True)
            counts = self.counts[layer]
            counts.zero_()
            counts.scatter_add_(0, flat, self.ones)
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            src = order // s.top_k
            xs = h.index_select(0, src)
            g = torch._grouped_mm(xs, w["e_gu"].transpose(-2, -1), offs=offs)
            a = F.silu(g[:, : s.expert_ffn]) * g[:, s.expert_ffn:]
            y = torch._grouped_mm(a, w["e_d"].transpose(-2, -1), offs=offs)
            y = y * weights.view(-1)[order].unsqueeze(1).to(y.dtype)
            routed = torch.zeros(t, s.hidden, device=h.device, dtype=h.dtype).index_add_(0, src, y)
        else:
            routed = self.proj
        if s.shared_ffn:
            shared = self._mlp(w, h, on, s.shared_ffn, "s_gu", "s_d")
            return routed + shared if "other" in on else routed
        return routed

    # ---------------------------------------------------------------- the step

    def _weights(self, layer: int) -> dict[str, torch.Tensor]:
        return self.w.sets[layer % len(self.w.sets)]

    def _ffn_block(self, layer: int, x: torch.Tensor, o: torch.Tensor, on: frozenset[str]) -> torch.Tensor:
        """Residual add of the attention output, then the layer's MLP or MoE and its residual."""
        s, ws = self.s, self._weights(layer)
        if "other" in on:
            x = x + o
        h = F.rms_norm(x, (s.hidden,), ws["n2"]) if "other" in on else x
        if s.experts and layer >= s.first_dense:
            y = self._moe(layer, ws, h, on)
        elif s.experts:
            y = self._mlp(self.w.dense_first[layer], h, on, s.dense_ffn, "gu", "d")
        else:
            y = self._mlp(ws, h, on, s.dense_ffn, "gu", "d")
        if "other" in on:
            x = x + y
        return x

    def _head(self, x: torch.Tensor, on: frozenset[str]) -> torch.Tensor:
        s, w = self.s, self.w
        h = F.rms_norm(x, (s.hidden,), w.final_norm) if "other" in on else x
        logits = h @ w.lm_head if "dense" in on else self.lm
        if "other" in on:
            torch.argmax(logits, dim=-1)
        return logits

    def run(self, on: frozenset[str]) -> torch.Tensor:
        """The whole stack with the parts in ``on``; returns the logits."""
        s = self.s
        x = self.x0
        for i in range(s.layers):
            ws = self._weights(i)
            h = F.rms_norm(x, (s.hidden,), ws["n1"]) if "other" in on else x
            o = self._gqa(i, ws, h, on) if s.attention == "gqa" else self._mla(i, ws, h, on)
            x = self._ffn_block(i, x, o, on)
        return self._head(x, on)

    def pieces(self) -> tuple[list[tuple[str, Any]], list[dict[str, torch.Tensor]]]:
        """The whole step as vLLM's piecewise CUDA-graph mode splits it: the attention op of each
        layer is the split point. Returns ``[("graph", fn), ("eager", fn), ..., ("graph", fn)]``:
        ``layers + 1`` pieces to capture (embedding side to layer 0's attention, one layer's
        attention output to the next layer's attention, the last to the logits) and ``layers``
        attention ops run eagerly between them; and the per-layer state the pieces hand on (the
        residual, the attention op's inputs, at the end ``logits``)."""
        s, on = self.s, ALL
        state: list[dict[str, torch.Tensor]] = [{} for _ in range(s.layers + 1)]

        def pre(i: int, x: torch.Tensor) -> None:
            ws = self._weights(i)
            h = F.rms_norm(x, (s.hidden,), ws["n1"])
            if s.attention == "gqa":
                q, k, v = self._gqa_pre(ws, h, on)
                state[i].update(x=x, q=q, k=k, v=v)
            else:
                c_kv, k_pe, q_pe, qb = self._mla_pre(ws, h, on, absorb=False)
                state[i].update(x=x, c_kv=c_kv, k_pe=k_pe, q_pe=q_pe, qb=qb)

        def attend(i: int) -> None:
            st = state[i]
            if s.attention == "gqa":
                self._gqa_attend(i, st["q"], st["k"], st["v"])
            else:  # vLLM's MLA op holds the W_UK and W_UV products
                ws = self._weights(i)
                self._mla_absorb_q(ws, st["qb"])
                self._mla_attend(i, st["c_kv"], st["k_pe"], st["q_pe"])
                self._mla_absorb_o(ws)

        def between(i: int) -> None:
            o = self.attn_flat @ self._weights(i)["o"]
            x = self._ffn_block(i, state[i]["x"], o, on)
            if i + 1 < s.layers:
                pre(i + 1, x)
            else:
                state[s.layers]["logits"] = self._head(x, on)

        out: list[tuple[str, Any]] = [("graph", lambda: pre(0, self.x0))]
        for i in range(s.layers):
            out += [("eager", lambda i=i: attend(i)), ("graph", lambda i=i: between(i))]
        return out, state

    def distinct_experts(self) -> float:
        """Mean distinct experts per MoE layer in the last run (0 for a dense model)."""
        if not self.s.experts:
            return 0.0
        return float((self.counts[self.s.first_dense:] > 0).sum(dim=1).float().mean())


# --------------------------------------------------------------------------- timing


def _time(fn: Any, device: torch.device, reps: int, graphs: bool) -> list[float]:
    """Milliseconds of ``reps`` runs (CUDA: one graph, replayed; CPU: eager)."""
    if not graphs:
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return times
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up on a side stream before capture (Triton compiles, cuBLAS picks kernels)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    return times


def measure(step: Step, device: torch.device, reps: int, graphs: bool) -> dict[str, Any]:
    full = _time(lambda: step.run(frozenset({"other", *PARTS})), device, reps, graphs)
    row: dict[str, Any] = {"step_ms": statistics.median(full), "step_ms_min": min(full), "step_ms_max": max(full),
                           "distinct_experts": step.distinct_experts()}
    parts = 0.0
    for part in PARTS:
        if part == "moe" and not step.s.experts:
            row["moe_ms"] = 0.0
            continue
        times = _time(lambda p=part: step.run(frozenset({p})), device, reps, graphs)
        row[f"{part}_ms"] = statistics.median(times)
        parts += row[f"{part}_ms"]
    row["other_ms"] = row["step_ms"] - parts
    return row


GRAPH_MODES = ("full", "piecewise", "eager")


def _graph_mode_launchers(step: Step, modes: list[str], graphs: bool) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """For each mode a function that launches one whole step, and one that returns its logits.

    ``full``: the whole stack captured into one CUDA graph (vLLM's FULL decode graphs).
    ``piecewise``: the graph split at every attention op, as vLLM's PIECEWISE mode splits it:
    ``layers + 1`` captured pieces sharing one memory pool, replayed in capture order, and each
    layer's attention op (cache write, packing, kernels, unpacking; for MLA also the W_UK / W_UV
    products) launched eagerly from Python between them. ``eager``: no graph at all.
    Without CUDA (``graphs`` false) every mode runs eagerly: piecewise then is eager."""
    pieces, state = step.pieces()
    launch: dict[str, Any] = {}
    logits: dict[str, Any] = {}
    keep: list[Any] = []
    if graphs:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up before capture (Triton compiles, cuBLAS picks)
            step.run(ALL)
            for _, fn in pieces:
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
    for mode in modes:
        if mode == "full" and graphs:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = step.run(ALL)
            keep += [graph, out]
            launch[mode], logits[mode] = graph.replay, (lambda out=out: out)
        elif mode == "piecewise" and graphs:
            pool = torch.cuda.graph_pool_handle()
            seq = []
            for kind, fn in pieces:
                if kind == "graph":
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool):
                        fn()
                    keep.append(graph)
                    seq.append(graph.replay)
                else:
                    seq.append(fn)
            keep.append(state)

            def run_pieces(seq: list[Any] = seq) -> None:
                for f in seq:
                    f()
            launch[mode], logits[mode] = run_pieces, (lambda: state[-1]["logits"])
        elif mode == "piecewise":
            def run_eager_pieces() -> None:
                for _, f in pieces:
                    f()
            launch[mode], logits[mode] = run_eager_pieces, (lambda: state[-1]["logits"])
        else:  # eager, or full without graphs
            held: dict[str, torch.Tensor] = {}

            def run_eager(held: dict[str, torch.Tensor] = held) -> None:
                held["logits"] = step.run(ALL)
            launch[mode], logits[mode] = run_eager, (lambda held=held: held["logits"])
    return launch, logits, keep


def _q(values: list[float], q: float) -> float:
    """Quantile ``q`` (0..1) by linear interpolation."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def measure_graph_modes(step: Step, modes: list[str], reps: int, graphs: bool) -> dict[str, Any]:
    """Each mode's step time on the same tensors, the modes interleaved rep by rep (their order
    alternating) so drift in clocks falls on all alike. Per mode: GPU time between CUDA events
    around the launch (``{mode}_ms``: median, min, max; it holds any gap where the GPU waits on
    Python), wall time to the step's end (``{mode}_wall_ms``) and the CPU time to launch it
    (``{mode}_launch_ms``). ``extra_ms``: the median of the paired differences piecewise minus
    full, with their 10th and 90th percentiles (``extra_ms_p10``, ``extra_ms_p90``)."""
    launch, logits, keep = _graph_mode_launchers(step, modes, graphs)
    for m in modes:
        launch[m]()
        launch[m]()
    if graphs:
        torch.cuda.synchronize()
    ref = logits[modes[0]]().float().clone()
    row: dict[str, Any] = {}
    # The same mode again: the noise floor of the comparison (a MoE step's index_add_ and
    # top-k ties are not deterministic; a dense step is, so its errors are exactly zero).
    launch[modes[0]]()
    if graphs:
        torch.cuda.synchronize()
    again = logits[modes[0]]().float()
    row[f"{modes[0]}_repeat_logits_rel_error"] = float((again - ref).norm() / ref.norm().clamp_min(1e-30))
    for m in modes[1:]:
        launch[m]()
        if graphs:
            torch.cuda.synchronize()
        got = logits[m]().float()
        row[f"{m}_logits_rel_error"] = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
    times: dict[str, dict[str, list[float]]] = {m: {"gpu": [], "wall": [], "launch": []} for m in modes}
    start = torch.cuda.Event(enable_timing=True) if graphs else None
    end = torch.cuda.Event(enable_timing=True) if graphs else None
    for r in range(reps):
        for m in modes if r % 2 == 0 else modes[::-1]:
            if graphs:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            if start is not None:
                start.record()
            launch[m]()
            t1 = time.perf_counter()
            if end is not None and start is not None:
                end.record()
                end.synchronize()
            t2 = time.perf_counter()
            times[m]["gpu"].append(start.elapsed_time(end) if start is not None and end is not None
                                   else (t2 - t0) * 1e3)
            times[m]["wall"].append((t2 - t0) * 1e3)
            times[m]["launch"].append((t1 - t0) * 1e3)
    for m in modes:
        t = times[m]
        row.update({f"{m}_ms": statistics.median(t["gpu"]), f"{m}_ms_min": min(t["gpu"]),
                    f"{m}_ms_max": max(t["gpu"]), f"{m}_wall_ms": statistics.median(t["wall"]),
                    f"{m}_launch_ms": statistics.median(t["launch"])})
    if "full" in modes and "piecewise" in modes:
        diff = [p - f for p, f in zip(times["piecewise"]["gpu"], times["full"]["gpu"], strict=True)]
        wall = [p - f for p, f in zip(times["piecewise"]["wall"], times["full"]["wall"], strict=True)]
        row.update(extra_ms=statistics.median(diff), extra_ms_p10=_q(diff, 0.1), extra_ms_p90=_q(diff, 0.9),
                   extra_wall_ms=statistics.median(wall),
                   extra_pct=100.0 * statistics.median(diff) / row["full_ms"] if row["full_ms"] > 0 else math.nan)
    del keep, launch, logits
    return row


# --------------------------------------------------------------------------- checks and the machine


def check(device: torch.device, use_triton: bool) -> dict[str, float]:
    """Relative error of the Triton attention (GQA and MLA layouts, decode and verify) and of the
    grouped expert GEMMs against float32 torch, on fresh random inputs."""
    out: dict[str, float] = {}
    gen = torch.Generator(device=device).manual_seed(int(time.time()) % 10000)
    for label, (b, kvh, group, n, ctx, d, dpe, dv) in {
        "gqa_decode": (3, 2, 4, 1, 300, 128, 0, 128), "gqa_verify": (3, 2, 4, 5, 300, 128, 0, 128),
        "mla_decode": (2, 1, 8, 1, 200, 512, 64, 512), "mla_verify": (2, 1, 8, 4, 200, 512, 64, 512),
    }.items():
        rows = group * n
        q = torch.randn(b, kvh, rows, d + dpe, device=device, generator=gen).to(torch.bfloat16)
        k = torch.randn(b, kvh, ctx + n + 7, d + dpe, device=device, generator=gen).to(torch.bfloat16)
        v = k[..., :dv] if dpe else torch.randn(b, kvh, ctx + n + 7, dv, device=device, generator=gen).to(torch.bfloat16)
        scale = 1.0 / math.sqrt(d + dpe)
        got = torch.full((b, kvh, rows, dv), float("nan"), device=device, dtype=torch.bfloat16)
        Attention(b, kvh, rows, n, ctx, d, dpe, dv, scale, device, 132, use_triton)(q, k, v, got)
        ref = reference_attention(q.double(), k.double(), v.double(), ctx, n, scale).double()
        out[label] = float((got.double() - ref).norm() / ref.norm())
    experts, top_k, hidden, ffn, tokens = 16, 4, 256, 128, 24
    x = torch.randn(tokens, hidden, device=device, generator=gen).to(torch.bfloat16)
    wgt = torch.randn(experts, ffn, hidden, device=device, generator=gen).to(torch.bfloat16)
    ids = torch.randint(0, experts, (tokens * top_k,), device=device, generator=gen)
    order = torch.argsort(ids, stable=True)
    offs = torch.cumsum(torch.bincount(ids, minlength=experts), 0).to(torch.int32)
    xs = x[order // top_k]
    got_mm = torch._grouped_mm(xs, wgt.transpose(-2, -1), offs=offs).double()
    ref_mm = torch.stack([xs[i].double() @ wgt[ids[order][i]].double().T for i in range(len(order))])
    out["grouped_mm"] = float((got_mm - ref_mm).norm() / ref_mm.norm())
    return out


def machine(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                            "torch": torch.__version__, "python": platform.python_version(),
                            "triton": getattr(triton, "__version__", None), "device": device.type}
    if device.type != "cuda":
        info["cpu_threads"] = torch.get_num_threads()
        return info
    props = torch.cuda.get_device_properties(device)
    info.update(gpu_name=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda,
                sm_count=props.multi_processor_count, l2_mib=round(getattr(props, "L2_cache_size", 0) / 2**20, 1))
    try:
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["driver"] = None
    # The two ceilings the timings are read against: a device copy and a bf16 matrix product.
    a = torch.empty(2**30, device=device, dtype=torch.uint8)
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    info["copy_tb_s"] = round(2 * 10 * a.numel() / (time.perf_counter() - t0) / 1e12, 2)
    m = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    m @ m
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        m @ m
    torch.cuda.synchronize()
    info["bf16_tflop_s"] = round(10 * 2 * 8192**3 / (time.perf_counter() - t0) / 1e12, 1)
    del a, b, m
    return info


# --------------------------------------------------------------------------- the grid


def grid(batches: list[int], ns: list[int], contexts: list[int]) -> list[tuple[int, int, int, str]]:
    """(batch, n, context, kind) in priority order: n = 1, 2, 4, 8 first at every batch and context,
    the other n after; each verify point is followed by its stand-in T(B*n, 1) when not yet timed."""
    first = [n for n in (1, 2, 4, 8) if n in ns]
    order = first + [n for n in ns if n not in first]
    points: list[tuple[int, int, int, str]] = []
    seen: set[tuple[int, int, int]] = set()
    for n in order:
        for ctx in contexts:
            for b in batches:
                for key, kind in (((b, n, ctx), "verify" if n > 1 else "decode"), ((b * n, 1, ctx), "decode")):
                    if key not in seen:
                        seen.add(key)
                        points.append((*key, kind))
    return points


def _axes(args: argparse.Namespace) -> tuple[list[int], list[int], list[int]]:
    """The grid's batches, tokens per sequence and contexts, from the command line."""
    return ([int(v) for v in args.batches.split(",")], [int(v) for v in args.ns.split(",")],
            [int(v) for v in args.contexts.split(",")])


def _stack_choices(s: Shape, args: argparse.Namespace, device: torch.device) -> tuple[bool, bool, int]:
    """(CUDA graphs, Triton attention, weight sets held): graphs and Triton on a GPU only; as many
    layers' weights as ``--weight-gb`` holds, so that steps read cold weights as a model does."""
    graphs = device.type == "cuda"
    return graphs, graphs and triton is not None, max(1, min(s.layers, int(args.weight_gb * 1e9 // Weights.layer_bytes(s))))


def run_shape(s: Shape, args: argparse.Namespace, device: torch.device, info: dict[str, Any]) -> dict[str, Any]:
    batches, ns, contexts = _axes(args)
    points = grid(batches, ns, contexts)
    capacity = max(b * n for b, n, _, _ in points)
    graphs, use_triton, sets = _stack_choices(s, args, device)
    t0 = time.monotonic()
    torch.manual_seed(0)
    weights = Weights(s, sets, device)
    kv = KVCache(s, capacity, max(contexts) + max(ns), device)
    sms = int(info.get("sm_count", 8))
    result: dict[str, Any] = {"machine": info, "shape": asdict(s), "weight_sets": sets,
                              "layer_weight_bytes": Weights.layer_bytes(s), "kv_capacity_seqs": capacity,
                              "cuda_graphs": graphs, "attention_kernel": "triton split-KV" if use_triton else "torch",
                              "reps": args.reps, "points": [], "setup_s": round(time.monotonic() - t0, 1)}
    deadline = time.monotonic() + args.time_budget_s
    out_path = os.path.join(args.out_dir, f"gpu-step-{s.name.replace('/', '-')}.json")
    for b, n, ctx, kind in points:
        if time.monotonic() > deadline:
            result["stopped_early"] = True
            break
        step = Step(s, weights, kv, b, n, ctx, device, sms, use_triton)
        row = {"batch": b, "n": n, "context": ctx, "kind": kind, "tokens": b * n,
               "splits": step.attn.splits, **measure(step, device, args.reps, graphs)}
        result["points"].append(row)
        del step
        print(f"{s.name} B={b:3d} n={n} ctx={ctx:5d} {kind:6s} step {row['step_ms']:8.3f} ms  attn "
              f"{row['attention_ms']:7.3f} moe {row['moe_ms']:7.3f} dense {row['dense_ms']:7.3f} other "
              f"{row['other_ms']:7.3f}  experts {row['distinct_experts']:.1f}", flush=True)
        result["seconds"] = round(time.monotonic() - t0, 1)
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)
    with open(out_path, "w") as f:  # once more: records a budget that stopped the grid early
        json.dump(result, f, indent=1)
    del weights, kv
    if graphs:
        torch.cuda.empty_cache()
    return result


def graph_mode_grid(batches: list[int], ns: list[int], contexts: list[int]) -> list[tuple[int, int, int]]:
    """(batch, n, context) in priority order: n = 1, 2, 4, 8 first, the other n after."""
    first = [n for n in (1, 2, 4, 8) if n in ns]
    order = first + [n for n in ns if n not in first]
    return [(b, n, ctx) for n in order for ctx in contexts for b in batches]


def run_graph_modes(s: Shape, args: argparse.Namespace, device: torch.device, info: dict[str, Any]) -> dict[str, Any]:
    """Full against piecewise CUDA-graph capture of the same stack, one file per shape."""
    modes = [m.strip() for m in args.graph_mode.split(",") if m.strip()]
    bad = [m for m in modes if m not in GRAPH_MODES]
    if bad or len(set(modes)) != len(modes):
        sys.exit(f"--graph-mode takes distinct modes from {', '.join(GRAPH_MODES)}; got {args.graph_mode!r}")
    batches, ns, contexts = _axes(args)
    points = graph_mode_grid(batches, ns, contexts)
    graphs, use_triton, sets = _stack_choices(s, args, device)
    t0 = time.monotonic()
    torch.manual_seed(0)
    weights = Weights(s, sets, device)
    kv = KVCache(s, max(batches), max(contexts) + max(ns), device)
    sms = int(info.get("sm_count", 8))
    note = ("piecewise: the step split at each layer's attention op (vLLM's PIECEWISE CUDA-graph mode): "
            f"{s.layers + 1} captured pieces, {s.layers} eager attention ops between them; full: one graph")
    if not graphs:
        note = ("no CUDA graphs on this device: every mode ran eagerly, so piecewise equals eager and equals "
                "full; the extra of piecewise over full is zero by construction and any difference here is "
                "timing noise")
    result: dict[str, Any] = {"machine": info, "shape": asdict(s), "weight_sets": sets,
                              "layer_weight_bytes": Weights.layer_bytes(s), "kv_capacity_seqs": max(batches),
                              "cuda_graphs": graphs, "attention_kernel": "triton split-KV" if use_triton else "torch",
                              "modes": modes, "piecewise_graphs": s.layers + 1, "eager_attention_ops": s.layers,
                              "note": note, "reps": args.reps, "command": " ".join(sys.argv), "points": [],
                              "setup_s": round(time.monotonic() - t0, 1)}
    deadline = time.monotonic() + args.time_budget_s
    out_path = os.path.join(args.out_dir, f"gpu-graph-mode-{s.name.replace('/', '-')}.json")
    for b, n, ctx in points:
        if time.monotonic() > deadline:
            result["stopped_early"] = True
            break
        step = Step(s, weights, kv, b, n, ctx, device, sms, use_triton)
        row = {"batch": b, "n": n, "context": ctx, "kind": "verify" if n > 1 else "decode", "tokens": b * n,
               "splits": step.attn.splits, **measure_graph_modes(step, modes, args.reps, graphs)}
        result["points"].append(row)
        del step
        line = "  ".join(f"{m} {row[f'{m}_ms']:8.3f} (launch {row[f'{m}_launch_ms']:6.3f})" for m in modes)
        extra = f"  extra {row['extra_ms']:+7.3f} ms ({row['extra_pct']:+5.1f} %)" if "extra_ms" in row else ""
        print(f"{s.name} B={b:3d} n={n} ctx={ctx:5d} {line}{extra}", flush=True)
        result["seconds"] = round(time.monotonic() - t0, 1)
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    del weights, kv
    if graphs:
        torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--shapes", default="dense-8b,moe-30b-a3b,kimi-k2.5-tp8-rank")
    parser.add_argument("--batches", default="1,2,4,8,16,32,64")
    parser.add_argument("--ns", default="1,2,3,4,5,6,7,8")
    parser.add_argument("--contexts", default="1024,4096")
    parser.add_argument("--reps", type=int, default=10, help="timed replays per graph (median)")
    parser.add_argument("--weight-gb", type=float, default=60.0, help="memory for distinct layer weight sets")
    parser.add_argument("--time-budget-s", type=float, default=1e9, help="per shape; points are in priority order")
    parser.add_argument("--device", default="auto", help="auto | cuda | cpu")
    parser.add_argument("--tiny", action="store_true", help="scaled-down shapes (a CPU check of the stack)")
    parser.add_argument("--check-only", action="store_true", help="run the numeric checks and stop")
    parser.add_argument("--out-dir", default=".")
    parser.add_argument("--graph-mode", default="",
                        help="e.g. full,piecewise (or full,piecewise,eager): time the whole step in each CUDA-graph "
                             "mode instead of part by part; writes gpu-graph-mode-<shape>.json")
    args = parser.parse_args()
    want = args.device
    device = torch.device("cuda" if want == "auto" and torch.cuda.is_available() else ("cpu" if want == "auto" else want))
    os.makedirs(args.out_dir, exist_ok=True)
    with torch.inference_mode():
        info = machine(device)
        use_triton = device.type == "cuda" and triton is not None
        info["checks_rel_error"] = check(device, use_triton)
        print(json.dumps(info), flush=True)
        bad = {k: v for k, v in info["checks_rel_error"].items() if not v < 2e-2}
        if bad:
            sys.exit(f"numeric check failed: {bad}")
        if args.check_only:
            return
        for name in args.shapes.split(","):
            if name not in SHAPES:
                sys.exit(f"unknown shape {name!r}; choose from {', '.join(SHAPES)}")
            shape = tiny(SHAPES[name]) if args.tiny else SHAPES[name]
            if args.graph_mode:
                run_graph_modes(shape, args, device, info)
            else:
                run_shape(shape, args, device, info)


if __name__ == "__main__":
    main()
