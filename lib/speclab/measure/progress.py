"""Progress bars with an ETA for long work, shown where the person waiting can see them.

Vocabulary layer (stdlib and tqdm only), so analysis, measurement, server and workbook
modules all draw their bars through it.

One call for every long loop (sweeps, answer generation, head training, calibration, probes):

    with progress.bar(total=len(prompts), desc="answers", unit="answer", show=show) as bar:
        for ... : bar.update(1)

Where the bar goes:

* ``--quiet`` (:func:`set_quiet`, or ``SPECLAB_QUIET=1`` in the environment, which children
  inherit): nowhere.
* Inside a notebook that ``speclab run``/``speclab demo`` executes headlessly: to the terminal
  that ran the command, never into the notebook (the HTML report stays free of bars). The
  runner opens :func:`relay_to_terminal` around papermill; it names a file in
  ``SPECLAB_PROGRESS_FILE`` that the kernel writes its bars to and the runner copies to its
  stderr as they come. This holds whatever ``show`` says: ``show`` is about this process's own
  output.
* Otherwise, with ``show`` true: ``tqdm.auto`` on stderr (a widget in JupyterLab, a text bar
  in a terminal); with ``show`` false: nowhere.

Scripts that run in the server's interpreter (they never import speclab) report progress as
stdout lines ``speclab-progress {"desc": ..., "total": ..., "done": ..., "unit": ...}``
(:data:`LINE_PREFIX`); :class:`LineFollower` turns them into bars and keeps every other line.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

QUIET_ENV = "SPECLAB_QUIET"
FILE_ENV = "SPECLAB_PROGRESS_FILE"
COLUMNS_ENV = "SPECLAB_PROGRESS_COLUMNS"
INTERVAL_ENV = "SPECLAB_PROGRESS_INTERVAL"
LINE_PREFIX = "speclab-progress "


def set_quiet(quiet: bool = True) -> None:
    """No bar from now on, in this process and the processes it starts (kernels, scripts)."""
    if quiet:
        os.environ[QUIET_ENV] = "1"
    else:
        os.environ.pop(QUIET_ENV, None)


def is_quiet() -> bool:
    return os.environ.get(QUIET_ENV, "") not in ("", "0")


def destination(show: bool = True) -> str:
    """Where a bar would go now: ``none``, ``relay`` (the runner's terminal) or ``here``."""
    if is_quiet():
        return "none"
    if os.environ.get(FILE_ENV):
        return "relay"
    return "here" if show else "none"


def bar(total: float | None = None, desc: str = "", *, unit: str = "it", show: bool = True,
        unit_scale: bool = False, leave: bool = True) -> Any:
    """A tqdm bar (``update(n)``, ``set_postfix_str(s)``, ``close()``; a context manager) with
    an ETA when ``total`` is known; a silent one where no bar should show (see the module)."""
    where = destination(show)
    if where == "relay":
        from tqdm import tqdm as text_bar

        stream = _relay_stream()
        if stream is not None:
            columns = os.environ.get(COLUMNS_ENV)
            return text_bar(total=total, desc=desc, unit=unit, unit_scale=unit_scale, leave=leave, file=stream,
                            ncols=int(columns) if columns else 100,
                            mininterval=float(os.environ.get(INTERVAL_ENV) or 0.5))
        where = "none"
    if where == "here":
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, leave=leave, file=sys.stderr)
    from tqdm import tqdm as silent

    return silent(total=total, desc=desc, unit=unit, disable=True)


_RELAY_LOCK = threading.Lock()
_RELAY_STREAM: tuple[str, IO[str]] | None = None


def _relay_stream() -> IO[str] | None:
    """The runner's file, opened once per process (appended to, line-buffered)."""
    global _RELAY_STREAM
    path = os.environ.get(FILE_ENV, "")
    with _RELAY_LOCK:
        if _RELAY_STREAM is None or _RELAY_STREAM[0] != path:
            try:
                _RELAY_STREAM = (path, open(path, "a", buffering=1, encoding="utf-8"))  # noqa: SIM115 - kept open
            except OSError:
                return None
        return _RELAY_STREAM[1]


@contextlib.contextmanager
def relay_to_terminal(stream: IO[str] | None = None, *, poll_s: float = 0.2) -> Iterator[Path | None]:
    """Around a headless notebook run: bars its kernel draws reach ``stream`` (stderr), not the
    notebook. Yields the relay file (None under ``--quiet``: nothing to relay)."""
    if is_quiet():
        yield None
        return
    out = stream or sys.stderr
    folder = Path(tempfile.mkdtemp(prefix="speclab-progress-"))
    path = folder / "bars.txt"
    path.touch()
    tty = bool(getattr(out, "isatty", lambda: False)())
    saved = {name: os.environ.get(name) for name in (FILE_ENV, COLUMNS_ENV, INTERVAL_ENV)}
    os.environ[FILE_ENV] = str(path)
    os.environ[COLUMNS_ENV] = str(shutil.get_terminal_size((100, 20)).columns if tty else 100)
    # a log file gets a bar every 30 s, a terminal redraws it
    os.environ[INTERVAL_ENV] = "0.5" if tty else "30"
    done = threading.Event()

    def copy() -> None:
        with open(path, encoding="utf-8", errors="replace") as source:
            while True:
                finished = done.is_set()
                chunk = source.read()
                if chunk:
                    out.write(chunk if tty else chunk.replace("\r", "\n"))
                    out.flush()
                elif finished:
                    return
                else:
                    time.sleep(poll_s)

    thread = threading.Thread(target=copy, name="speclab-progress-relay", daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join(5)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(folder, ignore_errors=True)


def progress_line(desc: str, done: float, total: float | None = None, unit: str = "it") -> str:
    """The line a script prints for a bar (what :class:`LineFollower` reads)."""
    return LINE_PREFIX + json.dumps({"desc": desc, "done": done, "total": total, "unit": unit})


class LineFollower:
    """Turns a child's ``speclab-progress`` lines into bars (one bar per ``desc``, the previous
    one closed when another starts) and keeps every other line, for the error detail."""

    def __init__(self, *, show: bool = True, keep: int = 400) -> None:
        self.show = show
        self.keep = keep
        self.lines: list[str] = []
        self._bar: Any = None
        self._desc: str | None = None
        self._done = 0.0

    def feed(self, line: str) -> None:
        if not line.startswith(LINE_PREFIX):
            self.lines.append(line)
            del self.lines[: -self.keep]
            return
        try:
            item = json.loads(line[len(LINE_PREFIX):])
            desc, done = str(item["desc"]), float(item["done"])
        except (ValueError, KeyError, TypeError):
            self.lines.append(line)
            return
        if desc != self._desc:
            self.close()
            self._bar = bar(total=item.get("total"), desc=desc, unit=str(item.get("unit") or "it"), show=self.show)
            self._desc, self._done = desc, 0.0
        if done > self._done:
            step = done - self._done
            self._bar.update(int(step) if float(step).is_integer() else step)  # "3/3", not "3.0/3"
            self._done = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._bar, self._desc = None, None

    def output(self) -> str:
        return "".join(line if line.endswith("\n") else line + "\n" for line in self.lines)
