"""The served model's tokenizer and chat template (speclab.traffic.tokens), on a tiny model folder."""

from __future__ import annotations

from pathlib import Path

from speclab.traffic.logs import normalise_row
from speclab.traffic.tokens import ChatTokenizer


def test_tokenizer_renders_the_chat_template_and_appends_eos(model_folder: Path) -> None:
    tok = ChatTokenizer.from_folder(model_folder)
    messages = [{"role": "user", "content": "kalo mi"}]
    assert tok.render(messages) == "<|im_start|>user\nkalo mi<|im_end|>\n<|im_start|>assistant\n"
    rows = [{"messages": messages, "completion": "ren ta", "finish_reason": "stop"},
            {"messages": messages, "completion": "ren ta", "finish_reason": "length"},
            {"prompt_token_ids": [7, 8], "output_token_ids": [9]}]
    records = [normalise_row(r, i)[0] for i, r in enumerate(rows)]
    batch = tok.tokenize(records)
    assert batch.prompts[0] == tok.encode_texts([tok.render(messages)])[0]
    assert batch.prompts[0][0] == tok.tokenizer.token_to_id("<|im_start|>")
    assert batch.outputs[0] == batch.outputs[1] + [tok.eos_id]
    assert list(batch.prompts[2]) == [7, 8] and list(batch.outputs[2]) == [9]
    assert ChatTokenizer.from_state(tok.state()).tokenize(records).prompts == batch.prompts
