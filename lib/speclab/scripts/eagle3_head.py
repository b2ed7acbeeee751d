"""A one-layer EAGLE-3 draft head in plain torch, computing what vLLM 0.32's loader computes.

Runs inside the server venv (torch only); it must not import speclab. The forward pass
follows vLLM 0.32 `vllm/model_executor/models/llama_eagle3.py` (default flags:
`norm_before_residual`, `norm_before_fc`, `fc_norm`, `norm_output` all off), so a head
trained here and saved with `state_dict_for_vllm` drafts the same tokens when served:

    g   = fc(concat(aux_low, aux_mid, aux_high))           # first step only
    x   = concat(input_layernorm(embed(token)), hidden_norm(g))   # 2 x hidden
    a   = attention(x) ; r = a + g                          # residual is g itself
    m   = mlp(post_attention_layernorm(r)) ; p = m + r     # p feeds the next step
    logits = lm_head(norm(p))                               # draft vocabulary

The training-time-test unroll (EAGLE-3, arXiv 2503.01840 section 3.2): step j >= 1 feeds
the head its own `p` from step j-1 and the embedding of the next true token; its query at
row t attends to step-0 keys at rows <= t plus its own chain's keys from steps 1..j
(row t only), at rope position t + j, which is what the head sees when vLLM drafts
position t + j + 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class HeadShape:
    """The head's dimensions; `target_hidden` is the verifier's hidden size."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    draft_vocab: int
    target_hidden: int
    num_aux: int = 3
    rope_theta: float = 1e5
    rms_eps: float = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding (Llama's), x: [batch, heads, seq, head_dim]."""
    half = x.shape[-1] // 2
    inv = 1.0 / (theta ** (torch.arange(0, half, device=x.device, dtype=torch.float32) / half))
    angles = positions.float()[:, None] * inv[None, :]  # [seq, half]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Eagle3Head(nn.Module):
    """One decoder layer over [embedding ; fused features], plus fc, norm and lm_head."""

    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        s = shape
        self.shape = s
        self.fc = nn.Linear(s.num_aux * s.target_hidden, s.hidden, bias=False)
        self.input_layernorm = RMSNorm(s.hidden, s.rms_eps)
        self.hidden_norm = RMSNorm(s.hidden, s.rms_eps)
        self.post_attention_layernorm = RMSNorm(s.hidden, s.rms_eps)
        self.q_proj = nn.Linear(2 * s.hidden, s.heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=False)
        self.gate_proj = nn.Linear(s.hidden, s.intermediate, bias=False)
        self.up_proj = nn.Linear(s.hidden, s.intermediate, bias=False)
        self.down_proj = nn.Linear(s.intermediate, s.hidden, bias=False)
        self.norm = RMSNorm(s.hidden, s.rms_eps)
        self.lm_head = nn.Linear(s.hidden, s.draft_vocab, bias=False)
        for lin in (self.fc, self.q_proj, self.k_proj, self.v_proj, self.o_proj,
                    self.gate_proj, self.up_proj, self.down_proj, self.lm_head):
            nn.init.normal_(lin.weight, std=0.02)

    def _qkv(self, embeds: torch.Tensor, g: torch.Tensor, positions: torch.Tensor):
        s = self.shape
        b, n, _ = embeds.shape
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(g)], dim=-1)
        q = self.q_proj(x).view(b, n, s.heads, s.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, s.kv_heads, s.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, s.kv_heads, s.head_dim).transpose(1, 2)
        q = _rope(q, positions, s.rope_theta)
        k = _rope(k, positions, s.rope_theta)
        if s.kv_heads != s.heads:
            rep = s.heads // s.kv_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        return q, k, v

    def _finish(self, attn: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        b, h, n, d = attn.shape
        r = self.o_proj(attn.transpose(1, 2).reshape(b, n, h * d)) + g
        m = self.post_attention_layernorm(r)
        m = self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))
        return m + r  # pre-norm output: vLLM feeds it back as the next step's hidden state

    def unrolled(self, aux: torch.Tensor, embeds: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Training-time test: draft logits for `steps` unrolled steps.

        `aux` [b, n, num_aux * target_hidden] are the target's features at rows 0..n-1;
        `embeds` [b, n + steps - 1, hidden] are embeddings of the tokens one ahead of each
        row (row t of step j uses embeds[:, t + j]). Returns one [b, n, draft_vocab] tensor
        per step; step j's row t predicts the token j + 2 positions after row t.
        """
        b, n, _ = aux.shape
        positions = torch.arange(n, device=aux.device)
        g = self.fc(aux)
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        out: list[torch.Tensor] = []
        scale = 1.0 / math.sqrt(self.shape.head_dim)
        for j in range(steps):
            q, k, v = self._qkv(embeds[:, j : j + n], g, positions + j)
            if j == 0:
                attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                k0, v0 = k, v
            else:
                keys.append(k)
                values.append(v)
                # causal scores over step-0 keys, plus one diagonal score per chain step
                s0 = torch.matmul(q, k0.transpose(-1, -2)) * scale
                causal = torch.ones(n, n, dtype=torch.bool, device=aux.device).tril()
                s0 = s0.masked_fill(~causal, float("-inf"))
                diag = torch.stack([(q * kk).sum(-1) * scale for kk in keys], dim=-1)
                weights = torch.softmax(torch.cat([s0, diag], dim=-1).float(), dim=-1).to(q.dtype)
                attn = torch.matmul(weights[..., :n], v0)
                attn = attn + (weights[..., n:].unsqueeze(-1) * torch.stack(values, dim=-2)).sum(-2)
            p = self._finish(attn, g)
            out.append(self.lm_head(self.norm(p)))
            g = p
        return out

    def state_dict_for_vllm(self) -> dict[str, torch.Tensor]:
        """Tensors named as vLLM 0.32's `Eagle3LlamaForCausalLM.load_weights` expects."""
        return {name: getattr(self, attr).weight.detach().contiguous() for attr, name in VLLM_NAMES.items()}

    def load_vllm_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy weights saved by `state_dict_for_vllm` (any dtype) into this head."""
        with torch.no_grad():
            for attr, name in VLLM_NAMES.items():
                getattr(self, attr).weight.copy_(tensors[name].float())


VLLM_NAMES = {
    "fc": "fc.weight",
    "input_layernorm": "midlayer.input_layernorm.weight",
    "hidden_norm": "midlayer.hidden_norm.weight",
    "post_attention_layernorm": "midlayer.post_attention_layernorm.weight",
    "q_proj": "midlayer.self_attn.q_proj.weight",
    "k_proj": "midlayer.self_attn.k_proj.weight",
    "v_proj": "midlayer.self_attn.v_proj.weight",
    "o_proj": "midlayer.self_attn.o_proj.weight",
    "gate_proj": "midlayer.mlp.gate_proj.weight",
    "up_proj": "midlayer.mlp.up_proj.weight",
    "down_proj": "midlayer.mlp.down_proj.weight",
    "norm": "norm.weight",
    "lm_head": "lm_head.weight",
}
