"""How speclab starts Jupyter kernels: encrypted (or IPC) transport, so no plain-TCP warning.

ipykernel warns "Kernel is running over TCP without encryption" whenever its ZeroMQ
sockets use TCP without CurveZMQ keys (``ipykernel/kernelapp.py``, ``init_sockets``).
jupyter_client (8.10+) can provision those keys itself when the kernelspec declares
``supported_encryption: curve`` (ipykernel's does): ``KernelManager.transport_encryption =
"auto"``. Where libzmq lacks CURVE, the kernel talks over IPC (Unix sockets) instead, which
never leaves the machine. Either way the warning is gone because its cause is.
"""

from __future__ import annotations

from typing import Any


def _curve_available() -> bool:
    try:
        import zmq
        from jupyter_client.manager import KernelManager
    except ImportError:
        return False
    return bool(zmq.has("curve")) and "transport_encryption" in KernelManager.class_traits()


def kernel_settings() -> dict[str, str]:
    """``KernelManager`` trait values: CurveZMQ-encrypted TCP, or IPC when CURVE is missing."""
    if _curve_available():
        return {"transport_encryption": "auto"}
    return {"transport": "ipc"}


def kernel_config() -> Any:
    """A traitlets Config for papermill / nbclient (``execute_notebook(..., config=...)``)."""
    from traitlets.config import Config

    config = Config()
    for name, value in kernel_settings().items():
        setattr(config.KernelManager, name, value)
    return config


def server_arguments() -> list[str]:
    """The same settings as command-line flags for ``jupyter lab`` / ``jupyter server``."""
    return [f"--KernelManager.{name}={value}" for name, value in kernel_settings().items()]
