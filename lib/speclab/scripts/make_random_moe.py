"""Write a random-weight Mixtral-architecture MoE and a dense Llama of equal active parameters,
with the embedded SmolLM2 tokenizer, as Hugging Face folders vLLM can load (server venv python).

    python make_random_moe.py TOKENIZER_DIR OUT_DIR [--experts 16 --top-k 2 --hidden 512 --ffn 2048 --layers 4]

Sized so expert weights dominate what a verify step reads (each expert: 3 x hidden x ffn).
Acceptance on random weights is meaningless; only step times are of interest.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tokenizer_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--ffn", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    tok = Path(args.tokenizer_dir)
    vocab = int(__import__("json").loads((tok / "config.json").read_text())["vocab_size"])
    common = dict(vocab_size=vocab, hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=8,
                  num_key_value_heads=4, max_position_embeddings=4096, tie_word_embeddings=True,
                  bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    torch.manual_seed(0)
    models = {
        "moe": MixtralForCausalLM(MixtralConfig(intermediate_size=args.ffn, num_local_experts=args.experts,
                                                num_experts_per_tok=args.top_k, **common)),
        "dense": LlamaForCausalLM(LlamaConfig(intermediate_size=args.ffn * args.top_k, **common)),
    }
    for name, model in models.items():
        folder = Path(args.out_dir) / name
        model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
        for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
            if (tok / file).exists():
                shutil.copy(tok / file, folder / file)
        print(folder, sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
