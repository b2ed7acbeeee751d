"""The streaming client every latency and token number in speclab comes from.

One parsing core, two transports behind one small interface (``transport``: ``Transport``),
what is asked in ``records`` (``Sampling``, ``RequestSpec``):

- ``sse``: ``SSEDecoder`` turns response-body bytes into SSE ``data`` payloads and
  ``StreamAccumulator`` turns timestamped payloads into one ``RequestRecord``; no I/O, so both
  transports and the unit tests feed the same code.
- ``fast``: a lean HTTP/1.1 client on an asyncio ``Protocol``, the default and the measured hot
  path (docs/client-performance.md: httpx falls behind beyond ~45 k chunks/s on one core).
- ``via_httpx``: ``httpx.AsyncClient`` (injectable transport, so unit tests run on
  ``httpx.MockTransport``); fine for notebooks and light loads.
- ``stream``: ``StreamClient``, one request in, one record out; ``harness``: uvloop and the
  loop-lag monitor that records when the client itself was late.

Token accounting (docs/measurement.md): reasoning arrives in ``delta.reasoning`` (vLLM) or
``delta.reasoning_content`` (SGLang, older vLLM) and both are read; output tokens come from the
server's usage, never from counting words.
"""

from speclab.measure.client.harness import LoopLagMonitor, measure_loop_lag, use_uvloop
from speclab.measure.client.records import RequestSpec, Sampling, TransportName
from speclab.measure.client.sse import SSEDecoder, StreamAccumulator
from speclab.measure.client.stream import IDLE_TIMEOUT_S, StreamClient, default_timeouts
from speclab.measure.client.transport import Transport
from speclab.runfolder import RequestRecord

__all__ = [
    "IDLE_TIMEOUT_S",
    "LoopLagMonitor",
    "RequestRecord",
    "RequestSpec",
    "SSEDecoder",
    "Sampling",
    "StreamAccumulator",
    "StreamClient",
    "Transport",
    "TransportName",
    "default_timeouts",
    "measure_loop_lag",
    "use_uvloop",
]
