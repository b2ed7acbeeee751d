"""``speclab whatif``: a deployment's predicted speedup per concurrency, before any restart
(docs/whatif.md)."""

from __future__ import annotations

import argparse
import json


def print_whatif(result: object, *, as_json: bool = False, long: bool = False) -> None:
    from speclab.whatif import text
    from speclab.whatif.predict import WhatIf

    assert isinstance(result, WhatIf)
    if as_json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(text.render(result, long=long))


def cmd_whatif(args: argparse.Namespace) -> int:
    from speclab.whatif import plots
    from speclab.whatif.predict import predict
    from speclab.whatif.scenario import load_scenario

    result = predict(load_scenario(args.scenario), draws=args.draws, strict_version=args.strict_version)
    print_whatif(result, as_json=args.json, long=args.long)
    if args.figure:
        plots.tornado_figure(result).savefig(args.figure, dpi=120)
        if not args.json:
            print(f"\ntornado figure: {args.figure}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from speclab.whatif.predict import DRAWS

    p = sub.add_parser("whatif", help="predict a deployment's speculative speedup per concurrency before any restart "
                                      "(a scenario YAML; docs/whatif.md)")
    p.add_argument("--scenario", required=True, help="the deployment as a what-if scenario YAML (docs/whatif.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object: name, rows (speedup, low, high, "
                                                       "verdict, parts per concurrency)")
    p.add_argument("--long", action="store_true", help="also every part's ms and every input's flip value")
    p.add_argument("--strict-version", action="store_true",
                   help="refuse where the mode table cannot place the engine version (default: span both)")
    p.add_argument("--draws", type=int, default=DRAWS, help="draws of the inputs for the 90 %% interval")
    p.add_argument("--figure", default=None, help="also write the tornado figure (PNG) here")
    p.set_defaults(func=cmd_whatif)
