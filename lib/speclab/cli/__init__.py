"""The ``speclab`` command: the same library functions the notebooks call.

One module per group of subcommands (``server``: setup/serve/probe/explain-seeds; ``bench``;
``workbook``: run/demo; ``traffic``: replay-logs/gen-traffic-log; ``whatif``), and ``kernels`` (how Jupyter
kernels start for ``run``/``demo`` and ``make lab``); this module only assembles the parser and
turns errors into one sentence.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from pydantic import ValidationError

from speclab.cli import bench, server, traffic, whatif, workbook
from speclab.errors import SpeclabError, explain_validation_error
from speclab.measure import progress
from speclab.urls import remember_secret_variable, strip_credentials_in_text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="speclab",
        description="Will speculative decoding pay off on your vLLM/SGLang server? Measure, predict, decide.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    for module in (server, bench, workbook, traffic, whatif):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one clear sentence on bad input, never a traceback."""
    from speclab.runs import terminate_like_ctrl_c

    parser = build_parser()
    args = parser.parse_args(argv)
    terminate_like_ctrl_c()
    # the key named by --api-key-env is hidden from everything printed from here on
    remember_secret_variable(getattr(args, "api_key_env", None))
    was_quiet = progress.is_quiet()
    if getattr(args, "quiet", False):  # no bar here, nor in the kernels and scripts started from here
        progress.set_quiet()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(stdout), RedactingStream(stderr)
    try:
        return _run(args)
    finally:
        sys.stdout, sys.stderr = stdout, stderr
        progress.set_quiet(was_quiet)


class RedactingStream:
    """A text stream that hides every secret value (`urls.strip_credentials_in_text`) from what
    is written through it: the CLI prints through it, progress bars included."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(strip_credentials_in_text(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding...
        return getattr(self._stream, name)


def _run(args: argparse.Namespace) -> int:
    from speclab.runs import Terminated

    try:
        return int(args.func(args) or 0)
    except ValidationError as exc:
        print(f"speclab: {strip_credentials_in_text(explain_validation_error(exc).message)}", file=sys.stderr)
        return 1
    except SpeclabError as exc:
        print(f"speclab: {strip_credentials_in_text(exc.message)}", file=sys.stderr)
        if exc.detail:
            print(strip_credentials_in_text(exc.detail), file=sys.stderr)
        return 1
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        print("speclab: the disk is full; free space and run again (records written so far are kept).",
              file=sys.stderr)
        return 1
    except Terminated:
        print("speclab: terminated (SIGTERM); servers stopped, measured data kept.", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("speclab: interrupted; servers stopped, measured data kept.", file=sys.stderr)
        return 130
