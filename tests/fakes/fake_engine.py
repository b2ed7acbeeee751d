"""A stand-in for an engine process, for fault injection (never for measurements).

Invoked as ``fake_engine.py <mode> <anything vllm-like> --port N``. Modes:
  healthy    serve /health 200 until SIGTERM
  exit       print a few log lines and exit 3 at once
  hang       never answer /health
  stubborn   like healthy, but ignore SIGTERM (forces the SIGKILL path)
Its /health answers through tests/fakes/base.py's quiet handler.
"""

import http.server
import signal
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the checkout's root holds the tests package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes.base import QuietHandler  # noqa: E402


def main() -> None:
    mode = sys.argv[1]
    port = int(sys.argv[sys.argv.index("--port") + 1])
    for i in range(25):
        print(f"fake engine log line {i}", flush=True)
    if mode == "exit":
        print("ERROR: fake engine failed on purpose", flush=True)
        sys.exit(3)
    if mode == "hang":
        time.sleep(3600)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
