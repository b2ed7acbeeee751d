"""The proposer's own time per engine step, timed before any restart.

vLLM's CPU proposers (n-gram, suffix decoding) run on the host every step of a speculative
server, a part of speculative mode's own cost that no probe of the baseline sees. This module
times the engine's own proposer classes (``scripts/proposer_time.py``, run with the server
venv's interpreter where ``vllm`` is installed) over a baseline run's real token sequences, at
each concurrency and k, and says which CPU it ran on. The result is recorded in the run folder
(``proposer.json``) and priced by :mod:`speclab.predict.modecost`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speclab.errors import SpeclabError
from speclab.paths import server_python
from speclab.runfolder import PROPOSER_JSON, read_records
from speclab.runs import host_info, write_json

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "proposer_time.py"
# sequences handed to the timer (the first of the run's, in send order): enough for every batch
# size to stay full for the steps timed
MAX_SEQUENCES = 64


def time_proposers(run_dir: str | Path, methods: Sequence[str], ks: Sequence[int], batches: Sequence[int], *,
                   server_local: bool = True, prompt_lookup: tuple[int, int] = (2, 4),
                   max_model_len: int = 2048, python: str | Path | None = None,
                   max_steps: int = 64) -> dict[str, Any]:
    """Time each method's proposer at each k and batch size over ``run_dir``'s recorded token
    sequences; the record (rows in ms per engine step, the CPU, whether it is the server's) is
    written to ``run_dir/proposer.json`` and returned. A method whose proposer cannot be timed
    (no server venv, no ``arctic_inference``) is recorded with the reason, never guessed."""
    records = [r for r in read_records(run_dir) if r.get("prompt_token_ids") and r.get("token_ids")]
    sequences = [{"prompt": [int(t) for t in r["prompt_token_ids"]], "output": [int(t) for t in r["token_ids"]]}
                 for r in records[:MAX_SEQUENCES]]
    interpreter = Path(python) if python else server_python()
    host = host_info()
    record: dict[str, Any] = {"cpu": host.get("cpu_model"), "isa": host.get("isa"), "cpus": host.get("cpus"),
                              "server_cpu": server_local, "rows": [], "failed": {}}
    if not server_local:
        record["note"] = ("timed on this machine's CPU, not the server's: the server runs elsewhere, so the "
                          "proposer's time there may differ")
    if not sequences:
        record["failed"] = {m: "the run recorded no token ids to replay" for m in methods}
    elif not methods:
        pass  # nothing on the CPU to time (ngram_gpu's proposer runs on the GPU)
    elif not interpreter.exists():
        record["failed"] = {m: f"no server venv at {interpreter} (make setup installs it)" for m in methods}
    else:
        payload = {"methods": list(methods), "ks": list(ks), "batches": list(batches), "sequences": sequences,
                   "prompt_lookup_min": prompt_lookup[0], "prompt_lookup_max": prompt_lookup[1],
                   "max_model_len": max_model_len, "max_steps": max_steps}
        try:
            done = subprocess.run([str(interpreter), str(_SCRIPT)], input=json.dumps(payload),
                                  capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            done = None
            record["failed"] = {m: f"the proposer timer did not finish ({exc})" for m in methods}
        if done is not None and done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            record["failed"] = {m: f"the proposer timer failed: {tail[0][:300]}" for m in methods}
        elif done is not None:
            answer = json.loads(done.stdout.strip().splitlines()[-1])
            record["rows"] = answer.get("rows", [])
            record["failed"] = answer.get("failed", {})
            record["cpu"] = answer.get("cpu") or record["cpu"]
    write_json(Path(run_dir) / PROPOSER_JSON, record)
    return record


def require_rows(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` when it timed at least one method, else one sentence saying why none was."""
    if not record.get("rows"):
        reasons = "; ".join(f"{m}: {why}" for m, why in (record.get("failed") or {}).items())
        raise SpeclabError(f"No proposer could be timed ({reasons or 'no method asked'}).")
    return record
