"""The fuzzing suite's long profile (issue 16, item 7; ``make fuzz``): ``--cases`` random cases from
``tests/fuzz_models.py`` through compile -> predict -> save -> load -> predict.

Prints a summary (cases, compiled, refused by an AieflowError with the commonest messages, internal
errors, save/load mismatches, time) and exits 1 on any internal error or mismatch, each written
out with its case and traceback.  Results are recorded in docs/security.md ("Fuzzing").
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzz_models import Tally, cases, run_case  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402


def run(n: int, at: int, progress: bool) -> tuple[Tally, float]:
    tally = Tally()
    start = time.perf_counter()

    @seed(at)
    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def one(case):
        tally.add(case, run_case(case))
        if progress and tally.cases % 250 == 0:
            print(f"  {tally.cases} cases, {len(tally.failures)} failures, {time.perf_counter() - start:.0f} s", flush=True)

    one()
    return tally, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top", type=int, default=25, help="how many refusal messages to list")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # numpy's overflow warnings on hostile inputs
    tally, seconds = run(args.cases, args.seed, not args.quiet)
    s = tally.by_status
    print(f"\nfuzz: {tally.cases} cases (seed {args.seed}) in {seconds:.0f} s")
    print(f"  compiled, saved, loaded, predicted bit for bit: {s['ok']}")
    print(f"  refused by an AieflowError:                     {s['refused']}")
    print(f"  internal errors (not AieflowError):             {s['error']}")
    print(f"  save/load mismatches:                           {s['mismatch']}")
    print("  by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.by_kind.items())))
    print(f"  refusals, by stage and first words ({len(tally.refusals)} kinds; top {args.top}):")
    for message, count in tally.refusals.most_common(args.top):
        print(f"    {count:5d}  {message}")
    for case, outcome in tally.failures:
        print(f"\n{outcome.status.upper()} at {outcome.stage}: {case.describe()}\n{outcome.detail}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
