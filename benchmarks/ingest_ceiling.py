"""How many token chunks per second can each client ingest? (flat-out local stream server)

A local server (its own process, pinned to core 1 when there are two) answers every
POST with an OpenAI chat stream as fast as the socket takes it: 256 content chunks, a
usage chunk, ``data: [DONE]``, one HTTP chunk per SSE event. Three clients read it, each
in its own worker process pinned to core 0, legs alternating so drift hits all alike:

- speclab ``transport="fast"`` (uvloop), speclab ``transport="httpx"`` (uvloop);
- aiohttp read the way ``vllm bench serve`` reads streams (its default asyncio loop):
  ``vllm.benchmarks.lib.endpoint_request_func`` imported from /work/main/.venv-server
  when it imports, else this file's re-implementation of the same reading loop.

Each leg runs C closed loops (send, read to the end, send again) for ``--seconds`` and
reports streams/s, chunks/s, client CPU per chunk and the client's own event-loop lag.
Run: ``.venv/bin/python benchmarks/ingest_ceiling.py`` (about 60 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_PYTHON = ROOT / ".venv-server" / "bin" / "python"
CHUNKS_PER_STREAM = 256
MODEL = "bench"


def pin(core: int) -> None:
    """Pin this process to one core when the machine has two or more."""
    try:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) >= 2:
            os.sched_setaffinity(0, {cores[core % len(cores)]})
    except (AttributeError, OSError):
        pass


def maybe_uvloop() -> bool:
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


# --------------------------------------------------------------------------- server


def build_response() -> bytes:
    """One whole chunked HTTP response: 256 content chunks, usage, [DONE]."""
    events = []
    for i in range(CHUNKS_PER_STREAM):
        obj = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1764400000,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": f" tok{i}"},
                    "logprobs": None,
                    "finish_reason": "length" if i == CHUNKS_PER_STREAM - 1 else None,
                }
            ],
        }
        events.append(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
    usage = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1764400000,
        "model": MODEL,
        "choices": [],
        "usage": {
            "prompt_tokens": 8,
            "completion_tokens": CHUNKS_PER_STREAM,
            "total_tokens": 8 + CHUNKS_PER_STREAM,
        },
    }
    events.append(b"data: " + json.dumps(usage, separators=(",", ":")).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )
    body = b"".join(f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events)
    return head + body + b"0\r\n\r\n"


def serve(port_file: str) -> None:
    """The stream server process: raw asyncio protocol, writes the whole answer at once."""
    pin(1)
    maybe_uvloop()
    response = build_response()

    class StreamServer(asyncio.Protocol):
        def __init__(self) -> None:
            self.buf = b""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            buf = self.buf + data
            while True:
                idx = buf.find(b"\r\n\r\n")
                if idx < 0:
                    break
                head = buf[:idx].lower()
                length = 0
                pos = head.find(b"content-length:")
                if pos >= 0:
                    eol = head.find(b"\r\n", pos)
                    length = int(head[pos + 15 : eol if eol >= 0 else len(head)])
                end = idx + 4 + length
                if len(buf) < end:
                    break
                buf = buf[end:]
                self.transport.write(response)  # as fast as the socket takes it
            self.buf = buf

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(StreamServer, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        Path(port_file).write_text(str(port))
        await asyncio.Event().wait()

    asyncio.run(main())


# --------------------------------------------------------------------------- client legs


class Lag:
    """The same sampler as speclab.measure.client.LoopLagMonitor (for the venv without speclab)."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.samples: list[float] = []
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            due = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.samples.append(max(0.0, time.perf_counter() - due))

    async def stop(self) -> dict[str, float | None]:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        values = sorted(self.samples)
        if not values:
            return {"p50_s": None, "p99_s": None, "max_s": None}
        return {
            "p50_s": values[len(values) // 2],
            "p99_s": values[min(len(values) - 1, round(0.99 * (len(values) - 1)))],
            "max_s": values[-1],
        }


async def closed_loops(send, concurrency: int, seconds: float, lag) -> dict:
    """C loops that each send, read the whole stream, and send again until time is up."""
    warm_until = time.perf_counter() + 0.3
    while time.perf_counter() < warm_until:  # connections opened, caches warm
        await asyncio.gather(*(send() for _ in range(concurrency)))
    streams = chunks = errors = 0
    start = time.perf_counter()
    cpu0 = time.process_time()
    stop_at = start + seconds
    lag.start()

    async def loop() -> None:
        nonlocal streams, chunks, errors
        while time.perf_counter() < stop_at:
            n = await send()
            if n is None:
                errors += 1
            else:
                streams += 1
                chunks += n

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    lag_summary = await lag.stop()
    return {
        "streams_per_s": streams / elapsed,
        "chunks_per_s": chunks / elapsed,
        "cpu_us_per_chunk": 1e6 * cpu / chunks if chunks else None,
        "cpu_share": cpu / elapsed,
        "errors": errors,
        "lag": lag_summary,
    }


async def speclab_leg(url: str, transport: str, concurrency: int, seconds: float) -> dict:
    sys.path.insert(0, str(ROOT / "lib"))
    from speclab.measure.client import LoopLagMonitor, RequestSpec, Sampling, StreamClient

    spec = RequestSpec("b", "p", "bench", messages=[{"role": "user", "content": "hi"}])
    async with StreamClient(
        url,
        MODEL,
        transport=transport,  # type: ignore[arg-type]
        sampling=Sampling(max_tokens=CHUNKS_PER_STREAM),
        max_connections=concurrency + 8,
    ) as client:
        t0 = time.perf_counter()
        bad: list[str] = []

        async def send() -> int | None:
            rec = await client.send(spec, t0)
            if not rec.ok or rec.output_tokens != CHUNKS_PER_STREAM:
                bad.append(rec.error or f"output_tokens={rec.output_tokens}")
                return None
            return rec.chunks

        result = await closed_loops(send, concurrency, seconds, LoopLagMonitor())
        if bad:
            result["first_error"] = bad[0]
        return result


def vllm_request_func():
    """vLLM's own chat stream reader, or None when it does not import here."""
    try:
        from vllm.benchmarks.lib.endpoint_request_func import (
            RequestFuncInput,
            async_request_openai_chat_completions,
        )
    except Exception:  # noqa: BLE001 - any import problem means: use the re-implementation
        return None
    return RequestFuncInput, async_request_openai_chat_completions


async def aiohttp_reimplementation(session, url: str) -> int | None:
    """Reads a chat stream the way vllm bench serve does: iter_any, SSE split, json.loads."""
    payload = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": CHUNKS_PER_STREAM,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    n_chunks = 0
    buffer = ""
    try:
        async with session.post(url=url, json=payload) as resp:
            if resp.status != 200:
                return None
            async for raw in resp.content.iter_any():
                raw = raw.strip()
                if not raw:
                    continue
                buffer += raw.decode()
                messages = []
                while "\n\n" in buffer:
                    message, buffer = buffer.split("\n\n", 1)
                    if message.strip():
                        messages.append(message.strip())
                if buffer.startswith("data: "):  # a complete trailing event without \n\n
                    tail = buffer[6:].strip()
                    try:
                        if tail == "[DONE]" or json.loads(tail) is not None:
                            messages.append(buffer.strip())
                            buffer = ""
                    except json.JSONDecodeError:
                        pass
                for message in messages:
                    if message.startswith(":"):
                        continue
                    data = message.removeprefix("data: ")
                    if data == "[DONE]":
                        continue
                    time.perf_counter()
                    obj = json.loads(data)
                    if obj.get("choices"):
                        n_chunks += 1
    except Exception:  # noqa: BLE001
        return None
    return n_chunks


async def aiohttp_leg(url: str, concurrency: int, seconds: float) -> dict:
    import aiohttp

    connector = aiohttp.TCPConnector(  # as vllm bench serve configures it
        limit=concurrency,
        limit_per_host=concurrency,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
        ssl=False,
    )
    api_url = url + "/v1/chat/completions"
    vllm = vllm_request_func()
    async with aiohttp.ClientSession(
        connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 3600)
    ) as session:
        if vllm is not None:
            request_input_cls, request_func = vllm

            async def send() -> int | None:
                out = await request_func(
                    request_input_cls(
                        prompt="hi",
                        api_url=api_url,
                        prompt_len=8,
                        output_len=CHUNKS_PER_STREAM,
                        model=MODEL,
                    ),
                    session,
                )
                if not out.success or out.output_tokens != CHUNKS_PER_STREAM:
                    return None
                return len(out.itl) + 1

        else:

            async def send() -> int | None:
                return await aiohttp_reimplementation(session, api_url)

        return await closed_loops(send, concurrency, seconds, Lag())


def worker(kind: str, url: str) -> None:
    """A long-lived client process: one JSON command per stdin line, one JSON result back."""
    pin(0)
    loop_name = "asyncio"
    source = ""
    if kind == "aiohttp":
        source = (
            "vllm.benchmarks.lib.endpoint_request_func (imported)"
            if vllm_request_func() is not None
            else "re-implementation in this file (vLLM did not import)"
        )
    elif maybe_uvloop():
        loop_name = "uvloop"
    print(json.dumps({"ready": True, "loop": loop_name, "source": source}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        c, seconds = cmd["concurrency"], cmd["seconds"]
        if kind == "aiohttp":
            result = asyncio.run(aiohttp_leg(url, c, seconds))
        else:
            result = asyncio.run(speclab_leg(url, kind, c, seconds))
        print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------- orchestration


def start_worker(kind: str, url: str) -> subprocess.Popen[str] | None:
    python = sys.executable
    if kind == "aiohttp":
        if not SERVER_PYTHON.exists():
            return None
        python = str(SERVER_PYTHON)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"))
    return subprocess.Popen(
        [python, __file__, "--worker", kind, "--url", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(ROOT),
    )


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fmt(value: float | None, scale: float = 1.0, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value * scale, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", metavar="PORT_FILE")
    parser.add_argument("--worker", choices=["fast", "httpx", "aiohttp"])
    parser.add_argument("--url")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per leg")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per leg")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.worker:
        worker(args.worker, args.url)
        return

    visible = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    pin(0)
    wall0 = time.perf_counter()
    port_file = Path(f"/tmp/speclab-ingest-{os.getpid()}.port")
    port_file.unlink(missing_ok=True)
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)])
    workers: dict[str, subprocess.Popen[str]] = {}
    try:
        deadline = time.time() + 15
        while not port_file.exists() or not port_file.read_text():
            if time.time() > deadline or server.poll() is not None:
                raise SystemExit("the stream server did not start")
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        info: dict[str, dict] = {}
        for kind in ("fast", "httpx", "aiohttp"):
            proc = start_worker(kind, url)
            if proc is None:
                print(f"skipping {kind}: {SERVER_PYTHON} not found")
                continue
            workers[kind] = proc
        for kind, proc in list(workers.items()):
            line = proc.stdout.readline() if proc.stdout else ""
            if not line:
                print(f"skipping {kind}: its worker did not start")
                del workers[kind]
                continue
            info[kind] = json.loads(line)

        print(
            f"ingest ceiling: {CHUNKS_PER_STREAM} chunks/stream, flat out, {args.seconds:g} s/leg, "
            f"{args.rounds} alternating rounds, server on core 1 and clients on core 0 "
            f"(cores visible: {visible or '?'})"
        )
        if "aiohttp" in info:
            print(f"aiohttp leg: {info['aiohttp']['source']}; loop {info['aiohttp']['loop']}")
        results: dict[tuple[str, int], list[dict]] = {}
        for _ in range(args.rounds):
            for c in args.concurrency:
                for kind, proc in workers.items():
                    assert proc.stdin and proc.stdout
                    cpu0, wall = process_cpu_s(server.pid), time.perf_counter()
                    proc.stdin.write(json.dumps({"concurrency": c, "seconds": args.seconds}) + "\n")
                    proc.stdin.flush()
                    result = json.loads(proc.stdout.readline())
                    # the server's CPU share over the whole leg (warm-up included)
                    result["server_cpu_share"] = (process_cpu_s(server.pid) - cpu0) / (
                        time.perf_counter() - wall
                    )
                    results.setdefault((kind, c), []).append(result)

        labels = {
            "fast": f"speclab fast ({info.get('fast', {}).get('loop', '?')})",
            "httpx": f"speclab httpx ({info.get('httpx', {}).get('loop', '?')})",
            "aiohttp": f"vllm bench serve reader ({info.get('aiohttp', {}).get('loop', '?')})",
        }
        for c in args.concurrency:
            ref = results.get(("aiohttp", c))
            ref_cps = statistics.median(r["chunks_per_s"] for r in ref) if ref else None
            print(f"\nC={c}")
            print(
                f"  {'client':<34} {'streams/s':>9} {'chunks/s':>9} {'vs vllm':>7} "
                f"{'CPU us/chunk':>12} {'CPU':>5} {'server CPU':>10} {'lag p50 ms':>10} "
                f"{'lag p99 ms':>10} {'err':>4}"
            )
            for kind in workers:
                runs = results[(kind, c)]
                med = lambda key, runs=runs: statistics.median(r[key] for r in runs)
                cps = med("chunks_per_s")
                lag50 = statistics.median(r["lag"]["p50_s"] or 0.0 for r in runs)
                lag99 = statistics.median(r["lag"]["p99_s"] or 0.0 for r in runs)
                ratio = f"{cps / ref_cps:.2f}x" if ref_cps else "-"
                print(
                    f"  {labels[kind]:<34} {fmt(med('streams_per_s')):>9} {fmt(cps):>9} {ratio:>7} "
                    f"{fmt(med('cpu_us_per_chunk'), 1, '.2f'):>12} {fmt(med('cpu_share'), 100, '.0f'):>4}% "
                    f"{fmt(med('server_cpu_share'), 100, '.0f'):>9}% "
                    f"{fmt(lag50, 1e3, '.2f'):>10} {fmt(lag99, 1e3, '.2f'):>10} "
                    f"{sum(r['errors'] for r in runs):>4}"
                )
                for r in runs:
                    if r.get("first_error"):
                        print(f"    first error: {r['first_error']}")
        print(
            f"\ntotal wall time {time.perf_counter() - wall0:.1f} s (medians of {args.rounds} rounds)"
        )
    finally:
        for proc in workers.values():
            if proc.stdin:
                proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.terminate()
        server.wait(timeout=5)
        port_file.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
