"""Train the embedded model's EAGLE-3 head, and time training steps, through the server venv.

Measurement side (starts the embedded server, runs torch scripts as subprocesses); the
arithmetic that uses the results lives in `speclab.eagle3.plan`, the method in
`docs/eagle3.md`. Every function that starts vLLM or trains expects its caller to hold
`/tmp/speclab-vllm.lock` on shared machines (the Makefile target and tests do).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import httpx

from speclab.eagle3.corpus import training_corpus
from speclab.errors import SpeclabError
from speclab.measure import progress as bars
from speclab.paths import cache_dir
from speclab.serve.embedded import SERVED_MODEL_NAME, embedded_launch, ensure_model, ensure_server_venv
from speclab.serve.launch import ManagedServer, free_port

_SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
# bump when the corpus, the pipeline or its defaults change: the cached head is rebuilt
TRAINED_HEAD_VERSION = "v1"
DEFAULT_TRAIN_SECONDS = 480.0
DEFAULT_PROMPTS = 280
# the short head tests and smoke runs share (seconds to build instead of minutes)
SMOKE_HEAD = {"prompts": 48, "seconds": 45.0, "max_tokens": 96}


def trained_head_dir(prompts: int = DEFAULT_PROMPTS, seconds: float = DEFAULT_TRAIN_SECONDS,
                     max_tokens: int = 256) -> Path:
    """Where the embedded model's trained head is cached (outside git), one per recipe."""
    recipe = f"p{prompts}-t{max_tokens}-s{seconds:g}"
    return cache_dir() / "drafters" / f"smollm2-135m-eagle3-trained-{TRAINED_HEAD_VERSION}-{recipe}"


def _answer(client: httpx.Client, url: str, item: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    body = {"model": SERVED_MODEL_NAME, "messages": item["messages"], "max_tokens": max_tokens,
            "temperature": 0.0, "return_token_ids": True}
    response = client.post(url, json=body)
    if response.status_code != 200:
        raise SpeclabError(f"The server refused a training prompt ({response.status_code}); its answer: {response.text[:200]}")
    data = response.json()
    choice = data["choices"][0]
    return {"id": item["id"], "category": item["category"], "prompt_token_ids": data["prompt_token_ids"],
            "output_token_ids": choice["token_ids"], "finish_reason": choice.get("finish_reason")}


def generate_answers(base_url: str, prompts: list[dict[str, Any]], out_path: Path, *,
                     max_tokens: int = 256, concurrency: int = 8, progress: bool = True) -> Path:
    """The served model's greedy answers with exact token ids, one JSONL row per prompt."""
    url = base_url.rstrip("/") + "/v1/chat/completions"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with httpx.Client(timeout=httpx.Timeout(300.0), limits=httpx.Limits(max_connections=concurrency)) as client, \
            ThreadPoolExecutor(concurrency) as pool, \
            bars.bar(total=len(prompts), desc="training answers", unit="answer", show=progress) as bar:
        futures = [pool.submit(_answer, client, url, item, max_tokens) for item in prompts]
        for future in as_completed(futures):
            future.result()  # the first refusal stops here, as one sentence
            bar.update(1)
        rows = [future.result() for future in futures]
    out_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out_path


def embedded_training_data(out_path: Path, *, prompts: int = 280, max_tokens: int = 256, log_dir: Path | None = None,
                           progress: bool = True) -> Path:
    """Start the embedded baseline server, collect its answers to the training corpus, stop it."""
    launch = embedded_launch(port=free_port())
    log = (log_dir or out_path.parent) / "datagen-server.log"
    with ManagedServer(launch, log, progress=progress) as server:
        return generate_answers(server.endpoint.root, training_corpus(prompts), out_path, max_tokens=max_tokens,
                                progress=progress)


def _run_script(args: list[str], what: str, threads: int | None = 2, *, python: str | None = None,
                progress: bool = True) -> str:
    """Run a script in the server venv; its ``speclab-progress`` lines become bars, the rest is
    returned (and shown, the end of it, when it fails). ``threads`` None: torch's own default."""
    interpreter = python or str(ensure_server_venv())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    follower = bars.LineFollower(show=progress)
    with subprocess.Popen([interpreter, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, errors="replace") as child:
        assert child.stdout is not None
        try:
            for line in child.stdout:
                follower.feed(line)
        finally:
            follower.close()
        code = child.wait()
    if code != 0:
        raise SpeclabError(f"{what} failed; the script's output ends with:", detail=follower.output()[-3000:])
    return follower.output()


def train_head(data: Path, out_dir: Path, *, seconds: float = DEFAULT_TRAIN_SECONDS, ttt: int = 3,
               draft_vocab: int = 4096, threads: int = 2, extra: list[str] | None = None,
               progress: bool = True) -> dict[str, Any]:
    """Train a head on `data` (answers with token ids) into `out_dir`; returns its training note."""
    target = ensure_model(ensure_server_venv())
    _run_script([str(_SCRIPTS / "train_eagle3_head.py"), "train", str(target), str(data), str(out_dir),
                 "--seconds", str(seconds), "--ttt", str(ttt), "--draft-vocab", str(draft_vocab),
                 "--threads", str(threads), *(extra or [])], "Training the EAGLE-3 head", threads, progress=progress)
    return json.loads((out_dir / "training.json").read_text())


def evaluate_head(head_dir: Path, data: Path, out_json: Path, *, steps: int = 3, threads: int = 2,
                  progress: bool = True) -> dict[str, Any]:
    """Run the head offline over `data`'s token ids; per-sample and overall per-position acceptance."""
    target = ensure_model(ensure_server_venv())
    _run_script([str(_SCRIPTS / "train_eagle3_head.py"), "evaluate", str(target), str(head_dir), str(data),
                 str(out_json), "--steps", str(steps), "--threads", str(threads)], "Evaluating the EAGLE-3 head", threads,
                progress=progress)
    return json.loads(out_json.read_text())


def ensure_trained_head(*, seconds: float = DEFAULT_TRAIN_SECONDS, prompts: int = DEFAULT_PROMPTS,
                        max_tokens: int = 256, progress: bool = True) -> Path:
    """The embedded model's trained head, built once (data generation + training) and cached.

    Starts the embedded server for the data and trains for `seconds`: hold the vLLM lock.
    ``progress``: bars for the answers, the target features and the training budget."""
    target = trained_head_dir(prompts, seconds, max_tokens)
    if (target / "model.safetensors").exists():
        return target
    work = target.parent / f"{target.name}-work"
    data = work / "answers.jsonl"
    if not data.exists():
        embedded_training_data(work / "answers.partial.jsonl", prompts=prompts, max_tokens=max_tokens, log_dir=work,
                               progress=progress)
        (work / "answers.partial.jsonl").rename(data)
    tmp = target.parent / f"{target.name}-partial"
    note = train_head(data, tmp, seconds=seconds, progress=progress)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    print(f"trained EAGLE-3 head in {target}: held-out per-position acceptance "
          f"{note['held_out_per_position_acceptance']} after {note['train_s']} s of training")
    return target


def measure_step_time(cases: list[dict[str, Any]], out_json: Path, *, python: str | None = None,
                      progress: bool = True) -> dict[str, Any]:
    """Time one training step per head shape on whatever device the server venv's torch sees."""
    out_json.parent.mkdir(parents=True, exist_ok=True)
    cases_path = out_json.with_suffix(".cases.json")
    cases_path.write_text(json.dumps(cases))
    _run_script([str(_SCRIPTS / "time_eagle3_step.py"), str(cases_path), str(out_json)],
                "Timing the training step", None, python=python, progress=progress)
    return json.loads(out_json.read_text())


if __name__ == "__main__":  # `make train-drafter` ([seconds] [prompts])
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_TRAIN_SECONDS
    prompts = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_PROMPTS
    print(ensure_trained_head(seconds=seconds, prompts=prompts))
