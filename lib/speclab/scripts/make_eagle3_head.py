"""Write a randomly initialised EAGLE-3 drafter head in the layout vLLM loads.

Runs inside the embedded server's venv (torch + safetensors); it must not import speclab.
Usage: python make_eagle3_head.py TARGET_MODEL_DIR OUT_DIR [SEED]
A random head is honest for exercising the code path: it accepts ~0 % of its drafts.
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file


def main() -> None:
    target = json.loads((Path(sys.argv[1]) / "config.json").read_text())
    out = Path(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    hidden = int(target["hidden_size"])
    heads = int(target["num_attention_heads"])
    kv_heads = int(target.get("num_key_value_heads", heads))
    head_dim = int(target.get("head_dim") or hidden // heads)
    inter = int(target["intermediate_size"])
    vocab = int(target["vocab_size"])
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "target_hidden_size": hidden,
        "max_position_embeddings": int(target.get("max_position_embeddings", 2048)),
        "rope_theta": float(target.get("rope_theta", 1e5)),
        "rms_norm_eps": float(target.get("rms_norm_eps", 1e-5)),
        "hidden_act": target.get("hidden_act", "silu"),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "speclab_note": "random initialisation: expect ~0 % acceptance",
    }
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * 0.02).to(torch.bfloat16)

    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)  # noqa: E731
    tensors = {
        "midlayer.input_layernorm.weight": ones(hidden),
        "midlayer.hidden_norm.weight": ones(hidden),
        "midlayer.post_attention_layernorm.weight": ones(hidden),
        # EAGLE-3's layer attends over [token embedding ; fused target features]: 2 x hidden in
        "midlayer.self_attn.q_proj.weight": rand(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": rand(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": rand(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": rand(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": rand(inter, hidden),
        "midlayer.mlp.up_proj.weight": rand(inter, hidden),
        "midlayer.mlp.down_proj.weight": rand(hidden, inter),
        # three target layers' hidden states fused into one
        "fc.weight": rand(hidden, 3 * hidden),
        "norm.weight": ones(hidden),
        "lm_head.weight": rand(vocab, hidden),
    }
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    print(f"wrote a RANDOM EAGLE-3 head to {out} (seed {seed}); expect ~0 % acceptance")


if __name__ == "__main__":
    main()
