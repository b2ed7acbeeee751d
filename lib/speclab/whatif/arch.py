"""A model's shape from its ``config.json``: what a step reads and computes, per layer kind.

Counts parameters by what a decode step does with them: attention projections (GQA, MLA, or a
DeepSeek-V4-style single latent head with sparse attention), linear-attention layers (Gated
DeltaNet / KDA, a fixed state per sequence), dense FFNs, routed experts and shared experts, and
the LM head. Keys follow the Hugging Face layout, nested ``text_config`` included; a missing key
the step needs is refused with one sentence naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from speclab.errors import SpeclabError

__all__ = ["Architecture", "from_config"]


@dataclass(frozen=True)
class Architecture:
    """Per-layer-kind parameter counts and cache sizes (all counts in parameters, bytes at 16 bits)."""

    name: str
    layers: int
    hidden: int
    vocab: int
    heads: int
    attn_layers: int  # full-attention layers
    linear_layers: int  # linear-attention layers (fixed state per sequence)
    attn_params: float  # per full-attention layer
    linear_params: float  # per linear-attention layer
    kv_bytes_per_token: float  # one full-attention layer, one token, 16-bit cache
    kv_shards_with_heads: bool  # GQA: the cache splits over TP ranks by KV head; MLA: replicated
    kv_heads: int
    attn_flops_per_context_token: float  # one layer, one query token, one cached token
    sparse_attention_tokens: int | None  # cached tokens an attention query reads at most (sparse attention)
    indexer_bytes_per_token: float  # a sparse-attention indexer's keys, one layer, one token
    linear_state_bytes: float  # one linear-attention layer, one sequence (16 bits)
    dense_ffn_layers: int
    dense_ffn_params: float  # per dense-FFN layer
    moe_layers: int
    experts: int
    top_k: int
    expert_params: float  # one routed expert
    shared_params: float  # shared experts of one MoE layer
    mtp_layers: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    dspark_stages: int = 0  # a checkpoint's own DSpark drafter: its stages (one per captured target layer)

    @property
    def is_moe(self) -> bool:
        return self.moe_layers > 0 and self.experts > 0

    @property
    def lm_head_params(self) -> float:
        return float(self.vocab * self.hidden)

    @property
    def dense_params(self) -> float:
        """Parameters every token reads (not routed experts), LM head included, embeddings out."""
        return (self.attn_layers * self.attn_params + self.linear_layers * self.linear_params
                + self.dense_ffn_layers * self.dense_ffn_params + self.moe_layers * self.shared_params
                + self.lm_head_params)

    @property
    def total_params(self) -> float:
        return self.dense_params + self.moe_layers * self.experts * self.expert_params + self.lm_head_params

    @property
    def active_params(self) -> float:
        return self.dense_params + self.moe_layers * self.top_k * self.expert_params

    def one_layer(self, *, moe: bool | None = None, ffn_params: float | None = None, vocab: int | None = None,
                  layers: int = 1) -> Architecture:
        """A model of ``layers`` layers (default one) of the same width and one LM head (a drafter: an
        MTP layer, an EAGLE head, a block drafter's stages)."""
        moe = self.is_moe if moe is None else moe
        from dataclasses import replace

        name = f"{self.name} (one layer)" if layers == 1 else f"{self.name} ({layers} layers)"
        return replace(self, name=name, layers=layers, attn_layers=layers, linear_layers=0,
                       dense_ffn_layers=0 if moe else layers,
                       dense_ffn_params=self.dense_ffn_params if ffn_params is None else ffn_params,
                       moe_layers=layers if moe else 0, vocab=self.vocab if vocab is None else vocab, mtp_layers=0)


def _text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    merged = {k: v for k, v in config.items() if k != "text_config"}
    inner = config.get("text_config")
    if isinstance(inner, Mapping):
        merged.update({k: v for k, v in inner.items() if v is not None or k not in merged})
    return merged


def _first(cfg: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def from_config(config: Mapping[str, Any], name: str = "model") -> Architecture:
    """The :class:`Architecture` of a Hugging Face ``config.json`` (a dict)."""
    if not isinstance(config, Mapping) or not config:
        raise SpeclabError("model.config is empty; give the model's config.json keys (num_hidden_layers, hidden_size, ...).")
    cfg = _text_config(config)
    notes: list[str] = []

    def need(*keys: str) -> Any:
        value = _first(cfg, *keys)
        if value is None:
            raise SpeclabError(f"model.config has no {keys[0]}; the step model needs it (copy it from the model's config.json).")
        return value

    layers, hidden = int(need("num_hidden_layers")), int(need("hidden_size"))
    vocab, heads = int(need("vocab_size")), int(need("num_attention_heads"))
    kv_heads = int(_first(cfg, "num_key_value_heads") or heads)
    head_dim = int(_first(cfg, "head_dim") or hidden // heads)

    # which layers attend fully, which are linear attention
    interval = _first(cfg, "full_attention_interval")
    linear_cfg = cfg.get("linear_attn_config") if isinstance(cfg.get("linear_attn_config"), Mapping) else None
    if linear_cfg and linear_cfg.get("full_attn_layers"):
        attn_layers = len(linear_cfg["full_attn_layers"])
    elif interval:
        attn_layers = layers // int(interval)
    else:
        attn_layers = layers
    linear_layers = layers - attn_layers
    lin_kh = int(_first(cfg, "linear_num_key_heads") or (linear_cfg or {}).get("num_heads") or 0)
    lin_vh = int(_first(cfg, "linear_num_value_heads") or (linear_cfg or {}).get("num_heads") or 0)
    lin_kd = int(_first(cfg, "linear_key_head_dim") or (linear_cfg or {}).get("head_dim") or 0)
    lin_vd = int(_first(cfg, "linear_value_head_dim") or (linear_cfg or {}).get("head_dim") or 0)
    if linear_layers and not (lin_vh and lin_kd and lin_vd):
        raise SpeclabError("model.config has linear-attention layers but no linear_num_value_heads / "
                           "linear_key_head_dim / linear_value_head_dim; the step model needs them.")
    linear_params = float(hidden * (2 * lin_kh * lin_kd + 3 * lin_vh * lin_vd)) if linear_layers else 0.0
    linear_state = float(lin_vh * lin_kd * lin_vd * 2) if linear_layers else 0.0
    if linear_layers:
        notes.append("linear-attention state per sequence read and written each step at 16 bits (assumed)")

    # attention
    kv_lora = _first(cfg, "kv_lora_rank")
    q_lora = _first(cfg, "q_lora_rank")
    rope = int(_first(cfg, "qk_rope_head_dim") or 0)
    sparse_tokens: int | None = None
    indexer_bytes = 0.0
    if kv_lora:  # MLA (DeepSeek-V3 family): a latent cache of kv_lora + rope per token, shared by every head
        nope = int(_first(cfg, "qk_nope_head_dim") or head_dim)
        v_dim = int(_first(cfg, "v_head_dim") or head_dim)
        q = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        attn_params = float(q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden)
        kv_bytes = float((kv_lora + rope) * 2)
        attn_flops = float(2 * heads * (2 * kv_lora + rope))  # absorbed decode: QK over latent+rope, PV over latent
        kv_sharded = False
    else:
        q = hidden * q_lora + q_lora * heads * head_dim if q_lora else hidden * heads * head_dim
        o_lora = _first(cfg, "o_lora_rank")
        o = (heads * head_dim * int(o_lora) // int(_first(cfg, "o_groups") or 1) + int(o_lora) * hidden) if o_lora \
            else heads * head_dim * hidden
        attn_params = float(q + 2 * hidden * kv_heads * head_dim + o)
        kv_bytes = float(2 * kv_heads * head_dim * 2)
        attn_flops = float(4 * heads * head_dim)
        kv_sharded = kv_heads > 1
        topk_tokens = _first(cfg, "index_topk")
        if topk_tokens:
            sparse_tokens = int(topk_tokens) + int(_first(cfg, "sliding_window") or 0)
            indexer_bytes = float(int(_first(cfg, "index_head_dim") or 128))  # FP8 indexer keys, one byte each
            kv_bytes = float(kv_heads * head_dim * 2)  # one latent head, keys and values shared
            notes.append(f"sparse attention: a query reads at most {sparse_tokens} cached tokens, plus the indexer's "
                         "keys over the whole context")

    # FFN: routed experts, shared experts, dense layers
    experts = int(_first(cfg, "n_routed_experts", "num_experts", "num_local_experts") or 0)
    top_k = int(_first(cfg, "num_experts_per_tok", "moe_top_k") or 0)
    dense_inter = _first(cfg, "dense_intermediate_size")
    moe_inter = _first(cfg, "moe_intermediate_size")
    if experts and moe_inter is None:
        moe_inter = _first(cfg, "intermediate_size")  # e.g. MiniMax: intermediate_size is the routed expert's
    if dense_inter is None:
        dense_inter = _first(cfg, "intermediate_size") if (moe_inter is None or moe_inter != cfg.get("intermediate_size")) else None
    if experts:
        if not top_k:
            raise SpeclabError("model.config has routed experts but no num_experts_per_tok; the step model needs it.")
        if moe_inter is None:
            raise SpeclabError("model.config has routed experts but no moe_intermediate_size; the step model needs it.")
        freq = cfg.get("moe_layer_freq")
        if isinstance(freq, list) and freq:
            moe_layers = int(sum(1 for f in freq if f))
        else:
            moe_layers = layers - int(_first(cfg, "first_k_dense_replace") or 0)
        dense_layers = layers - moe_layers
        shared_width = _first(cfg, "shared_expert_intermediate_size", "shared_intermediate_size")
        n_shared = int(_first(cfg, "n_shared_experts", "num_shared_experts") or (1 if shared_width else 0))
        shared_params = float(3 * hidden * (int(shared_width) if shared_width else n_shared * int(moe_inter)))
        if shared_width and n_shared > 1:
            shared_params *= n_shared
        expert_params = float(3 * hidden * int(moe_inter))
    else:
        moe_layers, dense_layers, shared_params, expert_params = 0, layers, 0.0, 0.0
    if dense_layers and dense_inter is None:
        raise SpeclabError("model.config has dense FFN layers but no intermediate_size; the step model needs it.")
    dense_ffn = float(3 * hidden * int(dense_inter)) if dense_layers else 0.0
    mtp = int(_first(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0)
    dspark_targets = cfg.get("dspark_target_layer_ids")
    dspark_stages = len(dspark_targets) if isinstance(dspark_targets, list) else 0
    return Architecture(
        name=name, layers=layers, hidden=hidden, vocab=vocab, heads=heads, attn_layers=attn_layers,
        linear_layers=linear_layers, attn_params=attn_params, linear_params=linear_params,
        kv_bytes_per_token=kv_bytes, kv_shards_with_heads=kv_sharded, kv_heads=kv_heads,
        attn_flops_per_context_token=attn_flops, sparse_attention_tokens=sparse_tokens,
        indexer_bytes_per_token=indexer_bytes, linear_state_bytes=linear_state, dense_ffn_layers=dense_layers,
        dense_ffn_params=dense_ffn, moe_layers=moe_layers, experts=experts, top_k=top_k,
        expert_params=expert_params, shared_params=shared_params, mtp_layers=mtp, notes=tuple(notes),
        dspark_stages=dspark_stages)
