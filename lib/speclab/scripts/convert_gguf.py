"""Convert a GGUF checkpoint to a Hugging Face folder that vLLM's CPU build can serve.

Runs inside the embedded server's venv (torch, transformers, gguf, accelerate); it must not
import speclab. Usage: python convert_gguf.py GGUF_FILE OUT_DIR
vLLM 0.32 cannot serve the GGUF on the CPU, so the weights are dequantised once to bf16.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig  # noqa: E402


def main() -> None:
    gguf = Path(sys.argv[1]).resolve()
    out = Path(sys.argv[2])
    tmp = out.with_name(out.name + ".partial")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.bfloat16,
        # without dequantize=True, save_pretrained fails ("not serializable")
        quantization_config=GgufConfig(dequantize=True),
    )
    tmp.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(tmp)
    model.save_pretrained(tmp)
    tmp.rename(out)  # the folder appears only once complete
    print(f"converted {gguf.name} -> {out}")


if __name__ == "__main__":
    main()
