"""The torch EAGLE-3 head's training-time-test unroll equals drafting one token at a time.

Runs a short script in the server venv (the workbook venv has no torch). For each row t
and step j the reference recomputes attention the way vLLM drafts position t + j + 1: the
query at rope position t + j attends to step-0 keys of rows 0..t and to the keys its own
chain wrote at steps 1..j. The unrolled (batched, masked) version must agree.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "lib" / "speclab" / "scripts"

CHECK = r'''
import sys, math, torch
sys.path.insert(0, sys.argv[1])
from eagle3_head import Eagle3Head, HeadShape, _rope
torch.manual_seed(0)
torch.set_grad_enabled(False)
s = HeadShape(hidden=32, heads=4, kv_heads=2, head_dim=8, intermediate=64, draft_vocab=50, target_hidden=32)
head = Eagle3Head(s).double()
n, steps = 7, 3
aux = torch.randn(1, n, 3 * s.target_hidden, dtype=torch.double)
emb = torch.randn(1, n + steps - 1, s.hidden, dtype=torch.double)
fast = head.unrolled(aux, emb, steps)

def qkv(e, g, pos):
    return head._qkv(e, g, torch.tensor([pos]))

g0 = head.fc(aux)
k0, v0 = [], []
for t in range(n):
    q, k, v = qkv(emb[:, t:t+1], g0[:, t:t+1], t)
    k0.append(k); v0.append(v)
worst = 0.0
for t in range(n):
    g = g0[:, t:t+1]
    ck, cv = [], []
    for j in range(steps):
        q, k, v = qkv(emb[:, t+j:t+j+1], g, t + j)
        if j > 0:
            ck.append(k); cv.append(v)
        keys = torch.cat(k0[:t+1] + ck, dim=2)
        vals = torch.cat(v0[:t+1] + cv, dim=2)
        w = torch.softmax((q @ keys.transpose(-1, -2)) / math.sqrt(s.head_dim), dim=-1)
        p = head._finish(w @ vals, g)
        logits = head.lm_head(head.norm(p))[0, 0]
        worst = max(worst, float((logits - fast[j][0, t]).abs().max()))
        g = p
print(worst)
assert worst < 1e-6, worst  # RMSNorm computes in float32
'''


@pytest.mark.integration
def test_unrolled_training_matches_one_token_at_a_time_drafting() -> None:
    from speclab.serve.embedded import ensure_server_venv

    result = subprocess.run([str(ensure_server_venv()), "-c", CHECK, str(SCRIPTS)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
