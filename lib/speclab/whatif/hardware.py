"""The GPUs and interconnects the what-if knows, with cited bandwidth and FLOP/s.

Data in ``lib/speclab/data/whatif/hardware.yaml``: per GPU its memory bandwidth and dense peak
FLOP/s by precision, per interconnect its all-reduce latency (a table by message size, or a
flat small-message latency) and bus bandwidth as a ``[low, high]`` range, each with its source.
An unknown GPU or interconnect is refused with the list of known ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from speclab.errors import SpeclabError

__all__ = ["GPU", "HARDWARE_FILE", "Interconnect", "allreduce_us", "gpu", "interconnect", "known_gpus"]

HARDWARE_FILE = Path(__file__).parents[1] / "data" / "whatif" / "hardware.yaml"


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_tb_s: float
    tflops: Mapping[str, float]
    nvlink: str | None
    source: str

    def peak_tflops(self, weight_bits: float) -> float:
        """Dense peak for GEMMs on weights of ``weight_bits``: FP8 tensor cores where the GPU has
        them and weights are 8 bits or fewer, else BF16."""
        if weight_bits <= 8 and "fp8" in self.tflops:
            return float(self.tflops["fp8"])
        return float(self.tflops["bf16"])


@dataclass(frozen=True)
class Interconnect:
    name: str
    bus_gb_s: tuple[float, float]
    alpha_us: tuple[float, float]
    table_us: Mapping[int, float] | None
    flat_bytes: int
    source: str


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    return dict(yaml.safe_load(HARDWARE_FILE.read_text()))


def known_gpus() -> list[str]:
    return sorted(_data()["gpus"])


def gpu(name: str) -> GPU:
    """The GPU of that name (or alias, any case); refused with the known names otherwise."""
    wanted = str(name).strip().lower()
    for key, body in _data()["gpus"].items():
        names = [key, *body.get("aliases", [])]
        if wanted in {n.lower() for n in names}:
            return GPU(key, float(body["hbm_tb_s"]), dict(body["tflops"]), body.get("nvlink"), body["source"])
    raise SpeclabError(f"The GPU {name!r} is not in speclab's GPU table; known GPUs: {', '.join(known_gpus())}.")


def interconnect(name: str, device: GPU) -> Interconnect:
    """The interconnect of that name (``nvlink`` resolves to the GPU's NVLink generation)."""
    table = _data()["interconnects"]
    key = str(name).strip().lower()
    if key == "nvlink":
        if not device.nvlink:
            raise SpeclabError(f"The {device.name} has no NVLink in speclab's GPU table; name its interconnect "
                               f"({', '.join(sorted(table))}).")
        key = device.nvlink
    if key not in table:
        raise SpeclabError(f"The interconnect {name!r} is not in speclab's table; known: nvlink, {', '.join(sorted(table))}.")
    body = table[key]
    rows = body.get("table_us")
    alpha = body.get("alpha_us") or [min(rows.values())] * 2
    return Interconnect(key, (float(body["bus_gb_s"][0]), float(body["bus_gb_s"][1])),
                        (float(alpha[0]), float(alpha[1])), {int(k): float(v) for k, v in rows.items()} if rows else None,
                        int(body.get("flat_bytes", max(rows) if rows else 65536)), body["source"])


def allreduce_us(link: Interconnect, message_bytes: Any, gpus: int, alpha_us: Any, bus_gb_s: Any) -> Any:
    """One all-reduce's time (µs) for messages of ``message_bytes`` over ``gpus`` GPUs.

    With a latency table: the table scaled so that its smallest entry is ``alpha_us``,
    log-interpolated (flat below its first size); past its last size, the ring's
    ``2 (g - 1) / g`` bytes over ``bus_gb_s``. Without a table: ``alpha_us`` flat up to
    ``flat_bytes``, the ring beyond. Arrays broadcast."""
    size = np.maximum(np.asarray(message_bytes, float), 1.0)
    alpha = np.asarray(alpha_us, float)
    bus = np.asarray(bus_gb_s, float) * 1e9
    ring = 2.0 * (gpus - 1) / gpus
    if link.table_us:
        sizes = np.array(sorted(link.table_us), float)
        times = np.array([link.table_us[int(s)] for s in sizes], float)
        scale = alpha / times.min()
        inside = np.interp(np.log(np.minimum(size, sizes[-1])), np.log(sizes), times) * scale
        beyond = np.maximum(size - sizes[-1], 0.0)
        return inside + ring * beyond / bus * 1e6
    beyond = np.maximum(size - link.flat_bytes, 0.0)
    return alpha + ring * beyond / bus * 1e6
