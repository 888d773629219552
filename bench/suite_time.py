"""Before/after wall time of test files: the same pytest node ids run with some files as they were at
REV ("before") and as they are now ("after"), alternately, so both see the same machine load.

    .venv/bin/python bench/suite_time.py --rev e3d6df1 --files tests/e2e/test_launch_ux.py \
        --rounds 2 -- tests/e2e/test_launch_ux.py

With --workers instead of --rev/--files, the same node ids run serially ("serial") and in two
pytest-xdist workers as scripts/test.sh runs the suite ("n2": -n 2 --dist loadfile
--no-loadscope-reorder), alternately:

    .venv/bin/python bench/suite_time.py --workers --rounds 2 -- tests/e2e/test_launch_local.py tests/unit/launcher

Prints one JSON object per run: variant, round, pytest's exit code, wall seconds, the failed node ids,
each test's seconds (setup + call + teardown, from `--durations=0`; with --workers only their sum)
and the 1-minute load average before and after. The
files are put back as they are in HEAD at the end, whatever happened; run it on a clean worktree.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATION = re.compile(r"^([\d.]+)s (?:call|setup|teardown)\s+(\S+)", re.M)
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)  # -ra's short summary


XDIST = ["-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]  # as scripts/test.sh


def run_pytest(ids: list[str], extra: tuple[str, ...] = ()) -> tuple[int, float, dict[str, float], list[str]]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", "-vv", *extra, *ids],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - t0
    per_test: dict[str, float] = {}
    for m in DURATION.finditer(p.stdout):
        per_test[m.group(2)] = round(per_test.get(m.group(2), 0.0) + float(m.group(1)), 2)
    return p.returncode, wall, per_test, sorted(set(FAILED.findall(p.stdout)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", help="the revision whose --files are 'before'")
    ap.add_argument("--files", nargs="+", help="files swapped between REV and HEAD")
    ap.add_argument("--workers", action="store_true", help="serial against -n 2 (no --rev/--files)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("ids", nargs="+", help="pytest node ids (after --)")
    a = ap.parse_args()
    if a.workers:
        return compare_workers(a.ids, a.rounds)
    if not (a.rev and a.files):
        ap.error("give --rev and --files, or --workers")
    try:
        for r in range(a.rounds):
            for variant in ("before", "after"):
                for f in a.files:
                    if variant == "before":
                        old = subprocess.run(["git", "show", f"{a.rev}:{f}"], cwd=ROOT, check=True,
                                             capture_output=True).stdout  # fmt: skip
                        (ROOT / f).write_bytes(old)
                    else:
                        subprocess.run(["git", "checkout", "HEAD", "--", f], cwd=ROOT, check=True)
                load0 = os.getloadavg()[0]
                rc, wall, per_test, failed = run_pytest(a.ids)
                rec = {"bench": "suite_time", "variant": variant, "round": r, "rc": rc, "wall_s": round(wall, 1),
                       "failed": failed, "tests_s": per_test, "load1_start": round(load0, 2),
                       "load1_end": round(os.getloadavg()[0], 2)}  # fmt: skip
                print(json.dumps(rec), flush=True)
    finally:
        subprocess.run(["git", "checkout", "HEAD", "--", *a.files], cwd=ROOT, check=True)
    return 0


def compare_workers(ids: list[str], rounds: int) -> int:
    for r in range(rounds):
        for variant, extra in (("serial", ()), ("n2", tuple(XDIST))):
            load0 = os.getloadavg()[0]
            rc, wall, per_test, failed = run_pytest(ids, extra)
            rec = {"bench": "suite_time", "variant": variant, "round": r, "rc": rc, "wall_s": round(wall, 1),
                   "failed": failed, "tests_sum_s": round(sum(per_test.values()), 1), "load1_start": round(load0, 2),
                   "load1_end": round(os.getloadavg()[0], 2)}  # fmt: skip
            print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
