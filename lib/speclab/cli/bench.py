"""``speclab bench``: one sweep against an endpoint (or the embedded server)."""

from __future__ import annotations

import argparse
from pathlib import Path

from speclab.cli.args import parse_int_list
from speclab.errors import SpeclabError


def cmd_bench(args: argparse.Namespace) -> int:
    from speclab.embedded import embedded_option
    from speclab.loadgen import SweepConfig, bench
    from speclab.options import SpecOption
    from speclab.runfolder import LEVEL_KEYS
    from speclab.target import ServerTarget

    if args.out and (Path(args.out) / "manifest.json").exists():
        raise SpeclabError(f"{args.out} already holds a run; give a new --out folder (runs are never overwritten).")
    if args.endpoint:
        option = (SpecOption() if args.option == "baseline"
                  else SpecOption(method=args.option, num_speculative_tokens=args.k))
        target = ServerTarget(mode="external", endpoint=args.endpoint, option=option,
                              strict_option=not args.any_option)
    else:
        target = ServerTarget(mode="embedded", option=embedded_option(args.option, args.k))
    chat_kwargs = None if args.thinking is None else {"enable_thinking": args.thinking == "on"}
    config = SweepConfig(
        concurrency=args.concurrency, rate=args.rate, prompts=args.prompts,
        categories=args.categories.split(",") if args.categories else None,
        per_category=args.per_category, repeats=args.repeats, warmup_requests=args.warmup,
        max_tokens=args.max_tokens, temperature=args.temperature, ignore_eos=args.ignore_eos,
        chat_template_kwargs=chat_kwargs, transport=args.transport, workers=args.workers,
        api_key_env=args.api_key_env,
    )
    result = bench(target, config, name=f"bench-{target.option.method}", run_dir=args.out,
                   progress=not args.quiet)
    header = ("concurrency", "rate", "requests", "errors", "output_tok_s", "ttft_s_median",
              "tpot_s_median", "acceptance_rate", "mean_acceptance_length", "foreign_traffic")
    assert set(header) <= set(LEVEL_KEYS)
    print("  ".join(f"{h:>14}" for h in header))
    for level in result.levels:
        cells = []
        for h in header:
            value = level.get(h)
            cells.append(f"{value:>14.4g}" if isinstance(value, float) else f"{value!s:>14}")
        print("  ".join(cells))
    print(f"results: {result.run_dir}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="sweep concurrency (or a Poisson rate) and record every request")
    p.add_argument("--endpoint", help="your server (any of http://h:p, http://h:p/v1); default: embedded")
    p.add_argument("--option", default="baseline",
                   choices=["baseline", "ngram", "suffix", "eagle3", "draft_model"],
                   help="embedded: the option to start; external: the option you expect")
    p.add_argument("--k", type=int, default=None, help="tokens drafted per step")
    p.add_argument("--any-option", action="store_true",
                   help="external: measure even when the server contradicts --option")
    p.add_argument("--prompts", help="a .jsonl prompt file or a ShareGPT .json (default: built-in)")
    p.add_argument("--categories", help="comma-separated categories (default: all)")
    p.add_argument("--per-category", type=int, default=3, help="prompts per category per level")
    p.add_argument("--concurrency", type=parse_int_list, default=[1, 4], help="levels, e.g. 1,4,16,64")
    p.add_argument("--rate", type=float, default=None, help="Poisson arrivals per second")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2, help="unmeasured requests before each level")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--thinking", choices=["on", "off"], default=None,
                   help="chat_template_kwargs enable_thinking (reasoning models)")
    p.add_argument("--transport", choices=["fast", "httpx"], default="fast")
    p.add_argument("--workers", type=int, default=1, help="client processes")
    p.add_argument("--api-key-env", default=None, help="env var holding the API key")
    p.add_argument("--out", default=None, help="run folder (default: outputs/<date>/<time>-bench-...)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_bench)
