"""How loaded this machine was while speclab measured: the other half of a trustworthy number.

A disturbed host reads a baseline slow, and a prediction calibrated while something else ran
is biased (on a 2-core host a neighbour using part of a core moved predicted-vs-measured by
10-40 %). Each level records, over its own window, from ``/proc``:

* ``foreign_cpu_cores``: CPU time used by processes that are *not* speclab's own process tree
  (the client, its workers, an embedded server), in cores: the neighbour's load;
* ``host_busy_cores`` and ``cpu_steal_pct`` (time the hypervisor gave to other guests);
* ``loadavg_1m`` at the end of the window.

and, taken before the level while the server is idle, ``host_probe_ms``: how long a fixed
single-threaded workload (integer arithmetic and a 32 MiB memory copy, best of three) took.
It catches what ``/proc`` cannot see: the same 2-core host has read step times 25-35 % apart
on different hours with no foreign process and no steal (a neighbour guest on the same
physical cores, or a throttled clock), which only a timed workload can see. Whether this probe
sees every such slowdown is not yet shown (docs/predictor.md, Host load).

Linux only for the ``/proc`` figures (elsewhere None); the probe runs everywhere. A server on another host is not seen (its own
machine's load is the user's to check).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU ticks at one instant: the whole host's and speclab's own process tree's."""

    wall_s: float
    busy_ticks: int
    steal_ticks: int
    total_ticks: int
    own_ticks: int


def _host_ticks() -> tuple[int, int, int]:
    """(busy, steal, total) from /proc/stat's aggregate ``cpu`` line."""
    fields = [int(v) for v in (_PROC / "stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq
    return busy, steal, busy + idle + iowait + steal


def _stat_fields(pid: str) -> list[str] | None:
    try:
        raw = (_PROC / pid / "stat").read_text()
    except OSError:  # the process ended between listing and reading
        return None
    # The command name is in parentheses and may hold spaces: split after its last ')'.
    return raw[raw.rfind(")") + 2:].split()


def _own_tree_ticks(root: int) -> int:
    """utime + stime of ``root`` and every live descendant (+ children ``root`` waited for)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name)
        if fields is None or len(fields) < 15:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        # fields after the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
        ticks[pid] = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if pid == root else 0)
    own = {root}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in own and pid not in own:
                own.add(pid)
                changed = True
    return sum(ticks.get(pid, 0) for pid in own)


def sample(root: int | None = None) -> CpuSample | None:
    """A snapshot now, or None where ``/proc`` cannot be read (not Linux)."""
    try:
        busy, steal, total = _host_ticks()
        own = _own_tree_ticks(root if root is not None else os.getpid())
    except (OSError, ValueError):
        return None
    return CpuSample(time.monotonic(), busy, steal, total, own)


def _loadavg_1m() -> float | None:
    try:
        return float((_PROC / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def window(before: CpuSample | None, after: CpuSample | None) -> dict[str, Any]:
    """The load between two samples, in cores and percent (None figures when unknown)."""
    empty: dict[str, Any] = {"foreign_cpu_cores": None, "host_busy_cores": None, "cpu_steal_pct": None,
                             "loadavg_1m": _loadavg_1m()}
    if before is None or after is None or after.wall_s <= before.wall_s:
        return empty
    hz = os.sysconf("SC_CLK_TCK")
    wall = after.wall_s - before.wall_s
    busy = (after.busy_ticks - before.busy_ticks) / hz
    own = (after.own_ticks - before.own_ticks) / hz
    total = after.total_ticks - before.total_ticks
    steal = after.steal_ticks - before.steal_ticks
    return {
        "foreign_cpu_cores": round(max(busy - own, 0.0) / wall, 3),
        "host_busy_cores": round(busy / wall, 3),
        "cpu_steal_pct": round(100.0 * steal / total, 2) if total > 0 else None,
        "loadavg_1m": empty["loadavg_1m"],
        "window_s": round(wall, 3),
    }


_PROBE_BUFFER = bytearray(32 << 20)


def speed_probe_ms(repeats: int = 3) -> float:
    """Milliseconds a fixed single-threaded workload takes on this host now (best of
    ``repeats``; ~10 ms each): a pure-Python integer loop and a 32 MiB copy, the two things
    a CPU decode step is made of (arithmetic and memory traffic). Only ratios between
    probes of the same host mean anything."""
    best = float("inf")
    view = memoryview(_PROBE_BUFFER)
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        total = 0
        for i in range(60_000):
            total += i * i ^ (i >> 3)
        copied = bytes(view)
        best = min(best, time.perf_counter() - started)
        del copied
    return round(best * 1000.0, 3)
