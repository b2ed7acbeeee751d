"""Write a reasoning variant of the embedded model: <think>/</think> tokens and a thinking template.

Runs inside the embedded server's venv (torch, transformers); it must not import speclab.
Usage: python make_think_variant.py BASE_DIR OUT_DIR

vLLM's ``deepseek_r1`` reasoning parser looks up ``<think>`` and ``</think>`` in the vocabulary
and refuses a tokenizer without them, which SmolLM2's is. This adds both as tokens (the
embedding matrix grows by two rows; SmolLM2 ties its output head to it), and makes the chat
template open every assistant turn inside ``<think>``. SmolLM2 was never trained to close a
thought, so the ``</think>`` row is set to a copy of the row of "," scaled by 1.05: with tied
weights its logit is 1.05x that of ",", so greedy decoding emits ``</think>`` wherever the
model would first pause mid-sentence, and the answer follows. A test fixture, not a reasoning
model: it gives the client a real server whose output arrives first as reasoning, then as
answer, counted by vLLM's own usage.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

OPEN, CLOSE = "<think>", "</think>"
GENERATION_PROMPT = "{{ '<|im_start|>assistant\n' }}"
# Thinking unless the request says chat_template_kwargs {"enable_thinking": false}.
THINKING = ("{% if enable_thinking is not defined or enable_thinking is none or enable_thinking %}"
            "{{ '<think>\n' }}{% endif %}")


def main() -> None:
    base = Path(sys.argv[1])
    out = Path(sys.argv[2])
    tmp = out.with_name(out.name + ".partial")
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    # Plain added tokens (not "special"): vLLM keeps them in the text, where the parser looks.
    added = tokenizer.add_tokens([OPEN, CLOSE])
    if added != 2:
        raise SystemExit(f"expected to add 2 tokens, added {added}")
    model.resize_token_embeddings(len(tokenizer))
    open_id, close_id = tokenizer.convert_tokens_to_ids([OPEN, CLOSE])
    comma = tokenizer.encode(",", add_special_tokens=False)[0]
    newline = tokenizer.encode("\n", add_special_tokens=False)[0]
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[open_id] = emb[newline]
        emb[close_id] = emb[comma] * 1.05
        head = model.get_output_embeddings()
        if head is not None and head.weight.data_ptr() != emb.data_ptr():
            head.weight[open_id] = head.weight[newline]
            head.weight[close_id] = head.weight[comma] * 1.05
    template = tokenizer.chat_template
    if not template or GENERATION_PROMPT not in template:
        raise SystemExit("the base chat template has no assistant generation prompt to open in thinking")
    tokenizer.chat_template = template.replace(GENERATION_PROMPT, GENERATION_PROMPT + THINKING)
    tmp.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(tmp)
    model.save_pretrained(tmp)
    tmp.rename(out)  # the folder appears only once complete
    print(f"reasoning variant of {base.name} -> {out} (<think>={open_id}, </think>={close_id})")


if __name__ == "__main__":
    main()
