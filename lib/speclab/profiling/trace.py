"""Stream-parse torch.profiler Chrome traces (gzip or plain, 1 GB and more) into compact tables.

The whole JSON is never held in memory. The reader decompresses a few MB at a time, cuts
the ``traceEvents`` array at the last ``}`` + ``,`` + ``{`` boundary of the buffer, and hands
that slice to orjson as a small array; a cut that falls inside a string or a nested object
cannot parse, so a failed slice is retried at an earlier boundary, which keeps the cut exact
for any JSON layout. Only what the analysis needs survives a chunk: per op or kernel its
interned name, category, start, duration, process, thread or stream and correlation id;
launch times by correlation id; and the user annotations (vLLM's per-step ranges).
``benchmarks/profile_parse.py`` measures this scanner against ijson's C backend and HTA.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import re
import time
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import orjson
import pandas as pd

from speclab.errors import SpeclabError

# Category codes of the ops table.
KERNEL, MEMCPY, MEMSET, CPU_OP = 0, 1, 2, 3
KIND_NAMES = ("kernel", "gpu_memcpy", "gpu_memset", "cpu_op")
_OP_CATS = {
    "kernel": KERNEL, "Kernel": KERNEL,  # older Kineto spelled categories capitalised
    "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
    "gpu_memset": MEMSET, "Memset": MEMSET,
    "cpu_op": CPU_OP, "Operator": CPU_OP,
}
_RUNTIME_CATS = frozenset(("cuda_runtime", "cuda_driver", "Runtime", "hip_runtime", "privateuse1_runtime"))
_ANNOTATION_CATS = {"user_annotation": "cpu", "gpu_user_annotation": "gpu"}

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"
CHUNK_BYTES = 8 << 20
HEADER_LIMIT = 64 << 20


@dataclass
class RankTrace:
    """One trace file, reduced to what the analysis needs. Times are in microseconds."""

    path: Path
    rank: int
    meta: dict[str, Any]
    names: list[str]
    ops: pd.DataFrame  # kind, name_id, ts_us, dur_us, pid, tid, corr
    launches: pd.DataFrame  # corr, ts_us (CUDA/HIP runtime and driver calls)
    annotations: pd.DataFrame  # name, where (cpu|gpu), ts_us, dur_us, pid, tid
    events: int = 0
    bytes_read: int = 0
    parse_s: float = 0.0
    backend: str = "scan"
    notes: list[str] = field(default_factory=list)

    @property
    def has_kernels(self) -> bool:
        return bool((self.ops["kind"] == KERNEL).any())

    @property
    def label(self) -> str:
        return f"rank {self.rank} ({self.path.name})"


# --------------------------------------------------------------------------- reading


def open_trace(path: str | Path) -> IO[bytes]:
    """A binary reader of the trace, gunzipping when the file is gzip (by its magic bytes)."""
    p = Path(path)
    try:
        with open(p, "rb") as probe:
            magic = probe.read(2)
    except FileNotFoundError:
        raise SpeclabError(f"The trace {p} does not exist; check the path.") from None
    if magic == b"\x1f\x8b":
        return typing.cast(IO[bytes], gzip.open(p, "rb"))
    return open(p, "rb")  # noqa: SIM115 - the caller closes it


def _parse_header(head: bytes) -> dict[str, Any]:
    """Top-level keys written before ``traceEvents`` (torch: schemaVersion, deviceProperties,
    distributedInfo, ...)."""
    text = head.strip()
    if not text.startswith(b"{"):
        return {}
    body = text.rstrip(_WS).rstrip(b",")
    try:
        parsed = orjson.loads(body + b"}")
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _parse_trailer(tail: bytes) -> dict[str, Any] | None:
    """Keys after the events array (``],"traceName": ...}``); None when it does not parse."""
    text = tail.strip(_WS)
    if not text:
        return {}
    if text.startswith(b","):
        text = text[1:].lstrip(_WS)
    if text == b"}":
        return {}
    try:
        parsed = orjson.loads(b"{" + text)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _boundaries(buf: bytes, stop: int) -> Iterator[int]:
    """Positions j (last first) where ``buf[j] == '}'`` is followed by ``,`` and ``{``."""
    pos = stop
    while True:
        brace = buf.rfind(b"{", 0, pos)
        if brace <= 0:
            return
        k = brace - 1
        while k >= 0 and buf[k] in _WS:
            k -= 1
        if k >= 0 and buf[k] == 0x2C:  # ','
            k -= 1
            while k >= 0 and buf[k] in _WS:
                k -= 1
            if k >= 0 and buf[k] == 0x7D:  # '}'
                yield k
        pos = brace


def iter_event_batches(
    path: str | Path,
    meta: dict[str, Any] | None = None,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    counter: list[int] | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """Yield the trace's events as lists of dicts, a few MB of JSON at a time.

    Top-level keys other than ``traceEvents`` are stored into ``meta`` (when given); the
    number of bytes read goes to ``counter[0]``. Accepts the object form
    (``{"traceEvents": [...]}``) and the bare-array form of the Chrome trace format.
    """
    meta = meta if meta is not None else {}
    with open_trace(path) as fh:
        buf = b""
        total = 0
        # 1. the header, up to the opening bracket of the events array
        while True:
            data = fh.read(chunk_bytes)
            total += len(data)
            buf += data
            stripped = buf.lstrip(_WS)
            if stripped.startswith(b"["):
                buf = stripped[1:]
                break
            found = _EVENTS_KEY.search(buf)
            if found:
                meta.update(_parse_header(buf[: found.start()]))
                buf = buf[found.end():]
                break
            if not data or len(buf) > HEADER_LIMIT:
                raise SpeclabError(
                    f"{path} holds no traceEvents array; is it a torch.profiler Chrome trace?"
                )
        # 2. the events, sliced at object boundaries
        need = chunk_bytes
        while True:
            if len(buf) < need:
                data = fh.read(chunk_bytes)
                if not data:
                    break
                total += len(data)
                buf += data
                continue
            events, buf = _take_events(buf, path)
            if counter is not None:
                counter[0] = total
            if events:
                need = chunk_bytes
                yield events
            else:  # one event longer than the buffer: read on
                need = len(buf) + chunk_bytes
        # 3. the last events, the closing bracket and the trailer
        tail_events, trailer = _finish(buf, path)
        meta.update(trailer)
        if counter is not None:
            counter[0] = total
        if tail_events:
            yield tail_events


def _take_events(buf: bytes, path: str | Path) -> tuple[list[dict[str, Any]], bytes]:
    """The complete events at the front of ``buf`` and the bytes after them."""
    for tries, j in enumerate(_boundaries(buf, len(buf))):
        if tries >= 256:
            break
        try:
            events = orjson.loads(b"[" + buf[: j + 1] + b"]")
        except orjson.JSONDecodeError:
            continue  # that "},{" sat inside a string or a nested array
        rest = buf[j + 1:].lstrip(_WS)
        return events, rest[1:]  # drop the comma
    # no usable boundary in this buffer (one huge event, or invalid JSON): read more; the
    # end of the file says which (``_finish`` parses the rest or reports the truncation)
    return [], buf


def _finish(buf: bytes, path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    pos = len(buf)
    for _ in range(4096):
        close = buf.rfind(b"]", 0, pos)
        if close < 0:
            break
        trailer = _parse_trailer(buf[close + 1:])
        if trailer is not None:
            body = buf[:close].strip(_WS)
            if not body:
                return [], trailer
            try:
                return orjson.loads(b"[" + body + b"]"), trailer
            except orjson.JSONDecodeError:
                pass
        pos = close
    raise SpeclabError(
        f"{path} ends before its traceEvents array closes; the trace is truncated "
        "(was /stop_profile interrupted?)."
    )


def iter_event_batches_ijson(path: str | Path, batch: int = 20000) -> Iterator[list[dict[str, Any]]]:
    """The same batches through ijson (the yajl2_c backend when installed); for comparison."""
    try:
        import ijson
    except ImportError:
        raise SpeclabError("The ijson backend needs the ijson package: pip install ijson.") from None
    with open_trace(path) as fh:
        head = fh.read(1)
        fh.seek(0)
        prefix = "item" if head == b"[" else "traceEvents.item"
        out: list[dict[str, Any]] = []
        for event in ijson.items(fh, prefix, use_float=True):
            out.append(event)
            if len(out) >= batch:
                yield out
                out = []
        if out:
            yield out


# --------------------------------------------------------------------------- reducing


class _Collector:
    """Keeps, per event batch, only the fields the analysis needs."""

    def __init__(self) -> None:
        self.name_ids: dict[str, int] = {}
        self.names: list[str] = []
        self.kind: list[int] = []
        self.name_id: list[int] = []
        self.ts: list[float] = []
        self.dur: list[float] = []
        self.pid: list[Any] = []
        self.tid: list[Any] = []
        self.corr: list[int] = []
        self.launch_corr: list[int] = []
        self.launch_ts: list[float] = []
        self.annotations: list[tuple[str, str, float, float, Any, Any]] = []
        self.events = 0

    def feed(self, events: list[dict[str, Any]]) -> None:
        # locals: this loop runs once per event of a 1 GB trace
        op_cats, runtime_cats, annotation_cats = _OP_CATS, _RUNTIME_CATS, _ANNOTATION_CATS
        name_ids, names = self.name_ids, self.names
        kind, name_id, ts, dur = self.kind.append, self.name_id.append, self.ts.append, self.dur.append
        pid, tid, corr = self.pid.append, self.tid.append, self.corr.append
        launch_corr, launch_ts = self.launch_corr.append, self.launch_ts.append
        annotations = self.annotations.append
        self.events += len(events)
        for e in events:
            if e.get("ph") != "X":
                continue
            cat = e.get("cat")
            code = op_cats.get(cat) if cat is not None else None
            if code is not None:
                name = e.get("name", "")
                nid = name_ids.get(name)
                if nid is None:
                    nid = name_ids[name] = len(names)
                    names.append(name)
                kind(code)
                name_id(nid)
                ts(e["ts"])
                dur(e.get("dur", 0.0))
                pid(e.get("pid"))
                args = e.get("args")
                if code == CPU_OP:
                    tid(e.get("tid"))
                    corr(-1)
                else:
                    tid(args.get("stream", e.get("tid")) if args else e.get("tid"))
                    corr(args.get("correlation", -1) if args else -1)
            elif cat in runtime_cats:
                args = e.get("args")
                if args:
                    c = args.get("correlation")
                    if c is not None:
                        launch_corr(c)
                        launch_ts(e["ts"])
            elif cat in annotation_cats:
                annotations((e.get("name", ""), annotation_cats[cat], e["ts"], e.get("dur", 0.0),
                             e.get("pid"), e.get("tid")))

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        ops = pd.DataFrame({
            "kind": np.asarray(self.kind, dtype=np.int8),
            "name_id": np.asarray(self.name_id, dtype=np.int32),
            "ts_us": np.asarray(self.ts, dtype=np.float64),
            "dur_us": np.asarray(self.dur, dtype=np.float64),
            "pid": _ids(self.pid),
            "tid": _ids(self.tid),
            "corr": np.asarray(self.corr, dtype=np.int64),
        })
        launches = pd.DataFrame({
            "corr": np.asarray(self.launch_corr, dtype=np.int64),
            "ts_us": np.asarray(self.launch_ts, dtype=np.float64),
        })
        annotations = pd.DataFrame(
            self.annotations, columns=["name", "where", "ts_us", "dur_us", "pid", "tid"])
        annotations["ts_us"] = annotations["ts_us"].astype(np.float64)
        annotations["dur_us"] = annotations["dur_us"].astype(np.float64)
        return ops, launches, annotations


def _ids(values: list[Any]) -> np.ndarray:
    """pid/tid columns: ints when they all are (Kineto also writes strings like "Spans")."""
    try:
        return np.asarray(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.asarray([str(v) for v in values], dtype=object)


_RANK_IN_NAME = re.compile(r"(?:^|[_.-])(?:rank|TP-)(\d+)(?:[_.-]|$)")


def rank_of(path: Path, meta: dict[str, Any], default: int) -> int:
    """The rank: ``distributedInfo.rank`` when present, else ``rank<N>``/``-TP-<N>`` in the name."""
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    found = _RANK_IN_NAME.search(path.name)
    return int(found.group(1)) if found else default


def read_trace(
    path: str | Path,
    *,
    rank: int | None = None,
    backend: Literal["scan", "ijson"] = "scan",
    chunk_bytes: int = CHUNK_BYTES,
    progress: Callable[[int], None] | None = None,
) -> RankTrace:
    """Parse one trace file into a :class:`RankTrace` without loading the whole JSON."""
    p = Path(path)
    started = time.perf_counter()
    meta: dict[str, Any] = {}
    counter = [0]
    collector = _Collector()
    if backend == "scan":
        batches = iter_event_batches(p, meta, chunk_bytes=chunk_bytes, counter=counter)
    elif backend == "ijson":
        batches = iter_event_batches_ijson(p)
        with open_trace(p) as fh:
            head = fh.read(min(chunk_bytes, HEADER_LIMIT))
        found = _EVENTS_KEY.search(head)
        if found:
            meta.update(_parse_header(head[: found.start()]))
    else:
        raise SpeclabError(f"Unknown trace backend {backend!r}; use 'scan' or 'ijson'.")
    try:
        for events in batches:
            collector.feed(events)
            if progress is not None:
                progress(counter[0])
    except (KeyError, TypeError, AttributeError) as exc:
        raise SpeclabError(f"{p} has an event without the fields a Chrome trace needs ({exc!r}).") from None
    ops, launches, annotations = collector.tables()
    return RankTrace(
        path=p,
        rank=rank if rank is not None else rank_of(p, meta, 0),
        meta=meta,
        names=collector.names,
        ops=ops,
        launches=launches,
        annotations=annotations,
        events=collector.events,
        bytes_read=counter[0] if backend == "scan" else p.stat().st_size,
        parse_s=time.perf_counter() - started,
        backend=backend,
    )


def find_trace_files(source: str | Path | Sequence[str | Path], include_frontend: bool = False) -> list[Path]:
    """Trace files in a folder (or the given list), vLLM's API-server trace left out unless asked."""
    if not isinstance(source, (str, Path)):
        files = [Path(s) for s in source]
    else:
        folder = Path(source)
        if folder.is_file():
            files = [folder]
        elif folder.is_dir():
            files = sorted(
                p for p in folder.rglob("*")
                if p.is_file() and p.name.endswith((".trace.json.gz", ".trace.json", ".json.gz"))
                and "trace" in p.name
            )
        else:
            raise SpeclabError(f"{folder} is neither a trace file nor a folder of traces; check the path.")
    if not include_frontend:
        files = [p for p in files if ".async_llm." not in p.name]
    if not files:
        raise SpeclabError(f"No trace files (*.trace.json[.gz]) found in {source}.")
    return files


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The parse allocates millions of acyclic dicts: the cyclic GC only slows it (3x measured)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_without_gc(path: Path, backend: Literal["scan", "ijson"]) -> RankTrace:
    with no_gc():
        return read_trace(path, backend=backend)


def read_traces(
    source: str | Path | list[str | Path],
    *,
    include_frontend: bool = False,
    backend: Literal["scan", "ijson"] = "scan",
    workers: int = 1,
) -> list[RankTrace]:
    """Every rank's trace, sorted by rank; ranks are made unique in file order if they clash.

    ``workers`` > 1 reads that many rank files at once, each in its own process (one core
    parses ~100 MB of JSON a second; 8 ranks of 1 GB want 8 cores)."""
    files = find_trace_files(source, include_frontend)
    if workers > 1 and len(files) > 1:
        import concurrent.futures
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(min(workers, len(files)), mp_context=context) as pool:
            traces = list(pool.map(_read_without_gc, files, [backend] * len(files)))
    else:
        traces = [_read_without_gc(p, backend) for p in files]
    seen: set[int] = set()
    for i, trace in enumerate(traces):
        if trace.rank in seen:
            trace.notes.append(f"rank {trace.rank} appears twice; this file is counted as rank {1000 + i}")
            trace.rank = 1000 + i
        seen.add(trace.rank)
    return sorted(traces, key=lambda t: t.rank)


# --------------------------------------------------------------------------- trimming


def trim_trace(
    path: str | Path,
    out: str | Path,
    *,
    start_us: float | None = None,
    end_us: float | None = None,
    drop_categories: tuple[str, ...] = ("python_function",),
    gzip_level: int = 9,
) -> dict[str, int]:
    """Write a smaller copy of a trace: events that start in ``[start_us, end_us)`` (all
    metadata events kept), header and trailer keys kept. For fixtures and bug reports."""
    meta: dict[str, Any] = {}
    kept: list[dict[str, Any]] = []
    seen = 0
    for events in iter_event_batches(path, meta):
        for e in events:
            seen += 1
            if e.get("cat") in drop_categories:
                continue
            if e.get("ph") not in ("M",) and "ts" in e:
                ts = float(e["ts"])
                if (start_us is not None and ts < start_us) or (end_us is not None and ts >= end_us):
                    continue
            kept.append(e)
    document = {**{k: v for k, v in meta.items()}, "traceEvents": kept}
    data = orjson.dumps(document)
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.name.endswith(".gz"):
        with gzip.open(target, "wb", compresslevel=gzip_level) as handle:
            handle.write(data)
    else:
        target.write_bytes(data)
    return {"events_in": seen, "events_out": len(kept), "bytes_json": len(data)}
