"""The ``speclab`` command: the same library functions the notebooks call.

One module per group of subcommands (``server``: setup/serve/probe/explain-seeds; ``bench``;
``workbook``: run/demo); this module only assembles the parser and turns errors into one sentence.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from speclab.cli import bench, server, traffic, workbook
from speclab.errors import SpeclabError, explain_validation_error
from speclab.urls import strip_credentials_in_text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="speclab",
        description="Will speculative decoding pay off on your vLLM/SGLang server? Measure, predict, decide.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    for module in (server, bench, workbook, traffic):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one clear sentence on bad input, never a traceback."""
    from speclab.runs import Terminated, terminate_like_ctrl_c

    parser = build_parser()
    args = parser.parse_args(argv)
    terminate_like_ctrl_c()
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
