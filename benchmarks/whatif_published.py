"""Published GPU results as the what-if's test: each published case predicted from what was known
before its run, against what was published (``speclab.whatif.cases``; docs/whatif.md section 5).

    .venv/bin/python benchmarks/whatif_published.py [--cases FILE.yaml] [--strict-version] [--out FILE.txt]

Per case and concurrency: the predicted speedup with its 90 % interval and verdict, the published
speedup, the error, whether the interval covers it and whether the verdicts agree; then coverage,
confidently-wrong counts (all cells, and those whose published effect lies beyond +-5 %) and the
median interval width. Cases that cannot be predicted are listed with their one-sentence reason and
left out of the scores, as are cells whose published speedup exceeds the acceptance length (not
speculation alone) or whose concurrency the source does not print.

Regime: published GPU results, each with its own engine and version as its entry says; nothing is
run here (seconds on a CPU).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from speclab.whatif import cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", default=None, help=f"cases YAML (default: {cases.CASES_FILE})")
    parser.add_argument("--strict-version", action="store_true",
                        help="refuse a case whose engine version the mode table cannot place (default: span both)")
    parser.add_argument("--draws", type=int, default=None, help="draws per case for the interval")
    parser.add_argument("--out", default=None, help="also write the printed output here")
    args = parser.parse_args()
    kwargs = {"strict_version": args.strict_version}
    if args.draws:
        kwargs["draws"] = args.draws
    results = cases.run_cases(args.cases, **kwargs)
    command = "make bench-whatif" + (f" ARGS='{' '.join(sys.argv[1:])}'" if sys.argv[1:] else "")
    title = (f"speclab what-if against published GPU results ({dt.date.today().isoformat()}; rerun: {command})\n"
             f"cases: {args.cases or cases.CASES_FILE.relative_to(Path(cases.__file__).parents[3])}; regime: "
             "published GPU results, engine versions as in each case; predictions from config, hardware table, "
             "baseline and option only")
    text = cases.report(results, title=title)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
