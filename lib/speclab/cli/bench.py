"""``speclab bench``: one sweep against an endpoint (or the embedded server).

The sweep's flags are built from :class:`speclab.sweep.SweepConfig`, the schema the notebooks
use, and ``-p file.yaml -p key=value`` works as in ``speclab run``: files in order, then
key=value overrides, then explicit flags; everything is validated before a server starts.
"""

from __future__ import annotations

import argparse
import sys
import typing
from typing import Any

import yaml

from speclab.errors import SpeclabError, explain_validation_error
from speclab.params import load_params_file, parse_override
from speclab.sweep import SweepConfig

# Fields of the sweep that the connection flags below already cover.
_NOT_FLAGS = {"api_key_env"}
_HEADER = ("concurrency", "rate", "requests", "errors", "output_tok_s", "ttft_s_median",
           "tpot_s_median", "acceptance_rate", "mean_acceptance_length", "foreign_traffic")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _is_list(annotation: Any) -> bool:
    return any(typing.get_origin(a) is list for a in (annotation, *typing.get_args(annotation)))


def _parse_flag_value(name: str, text: str) -> Any:
    """A flag's text as YAML; list fields also take ``1,4,16``."""
    annotation = SweepConfig.model_fields[name].annotation
    if _is_list(annotation) and not text.strip().startswith("["):
        return [yaml.safe_load(part) for part in text.split(",") if part.strip()]
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def sweep_from_args(args: argparse.Namespace) -> SweepConfig:
    """The validated sweep: params files, then key=value overrides, then flags."""
    values: dict[str, Any] = {}
    for item in args.params:
        if item.endswith((".yaml", ".yml")):
            values.update(load_params_file(item))
        else:
            key, value = parse_override(item)
            values[key] = value
    for name in SweepConfig.model_fields:
        text = getattr(args, name, None) if name not in _NOT_FLAGS else None
        if text is not None:
            values[name] = _parse_flag_value(name, text)
    values["api_key_env"] = args.api_key_env or values.get("api_key_env")
    unknown = sorted(set(values) - set(SweepConfig.model_fields))
    if unknown:
        raise SpeclabError(f"{', '.join(unknown)} is not a sweep setting; `speclab bench --help` lists them.")
    try:
        return SweepConfig.model_validate(values)
    except Exception as exc:  # pydantic's ValidationError, told in one sentence
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            raise explain_validation_error(exc, "sweep settings") from None
        raise


def cmd_bench(args: argparse.Namespace) -> int:
    from speclab.measure.loadgen import bench
    from speclab.options import default_option
    from speclab.outcome import EXIT_CODES
    from speclab.serve.embedded import embedded_option
    from speclab.serve.target import ServerTarget

    config = sweep_from_args(args)
    if args.endpoint is not None:
        if not args.endpoint.strip():
            # An unset shell variable must not silently measure the embedded server instead.
            raise SpeclabError("--endpoint is empty; give your server's URL, or leave --endpoint out "
                               "to start the embedded server.")
        target = ServerTarget(mode="external", endpoint=args.endpoint,
                              option=default_option(args.option, args.k), strict_option=not args.any_option)
    else:
        target = ServerTarget(mode="embedded", option=embedded_option(args.option, args.k))
    result = bench(target, config, name=f"bench-{target.option.method}", run_dir=args.out,
                   progress=not args.quiet)
    print("  ".join(f"{h:>14}" for h in _HEADER))
    for level in result.levels:
        cells = []
        for h in _HEADER:
            value = level.get(h)
            cells.append(f"{value:>14.4g}" if isinstance(value, float) else f"{value!s:>14}")
        print("  ".join(cells))
    print(f"results: {result.run_dir}")
    if result.outcome is not None and result.outcome.status != "ok":
        print(f"speclab: {result.outcome.status}: {result.outcome.sentence}", file=sys.stderr)
    return EXIT_CODES.get(result.status, 1)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="sweep concurrency (or a Poisson rate) and record every request",
                       description="Sweep a server and record every request. Sweep settings come from "
                                   "-p files / key=value and the flags below (the notebooks' schema).")
    p.add_argument("--endpoint", help="your server (any of http://h:p, http://h:p/v1); default: embedded")
    p.add_argument("--option", default="baseline",
                   choices=["baseline", "ngram", "suffix", "eagle3", "draft_model"],
                   help="embedded: the option to start; external: the option you expect")
    p.add_argument("--k", type=int, default=None, help="tokens drafted per step")
    p.add_argument("--any-option", action="store_true",
                   help="external: measure even when the server contradicts --option")
    p.add_argument("-p", "--params", action="append", default=[],
                   help="a params YAML file, or key=value (repeatable; later wins; flags win over both)")
    p.add_argument("--api-key-env", default=None, help="env var holding the API key (never stored)")
    p.add_argument("--out", default=None, help="run folder (default: outputs/<date>/<time>-bench-...)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep = p.add_argument_group("sweep settings (speclab.sweep.SweepConfig)")
    for name, field in SweepConfig.model_fields.items():
        if name in _NOT_FLAGS:
            continue
        default = field.get_default(call_default_factory=True)
        sweep.add_argument(_flag(name), dest=name, default=None, metavar="VALUE",
                           help=f"{field.description} (default: {default})")
    p.set_defaults(func=cmd_bench)
