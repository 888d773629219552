"""`python -m nsa.attention.gpusuite OUT_DIR [--quick|--interpret]` (what scripts/gpu-suite.sh runs).

Owns the run: sections in order, each given what is left of the time budget, each result written into
OUT_DIR/suite.json the moment it finishes (atomically: a run cut short by the clock or a crash keeps
every finished section), and a short summary on stdout. A section that fails is recorded with its
error and the run goes on. Sections (docs/gpu-suite.md):
  a env  b numerics  c determinism  d sanitizer  e speed  f train
--interpret runs a-c on CPU under TRITON_INTERPRET=1 with small shapes and the honest-bf16
interpreter patch, so CI proves the suite itself. Exit 0 when every section that ran passed, 1
otherwise, 2 on bad input. It installs nothing and writes only under OUT_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

SCHEMA = 1
SECTIONS = ("env", "numerics", "determinism", "sanitizer", "speed", "train")
LETTER = dict(zip(SECTIONS, "abcdef"))
# Wall-clock budgets (seconds) of the whole run, per mode (the 8 min / 3 min on one H100).
BUDGET = {"full": 480.0, "quick": 180.0, "interpret": 600.0}
# Most of the budget each section may use, so one slow section cannot starve the rest (a section that
# finishes early leaves its time unused: the run ends sooner).
SHARE = {"env": 0.03, "numerics": 0.35, "determinism": 0.05, "sanitizer": 0.12, "speed": 0.2, "train": 0.25}


class Suite:
    """The JSON document being written, and the clock."""

    def __init__(self, out_dir: Path, mode: str, budget: float) -> None:
        self.out_dir, self.mode = out_dir, mode
        self.t0 = time.monotonic()
        self.budget = budget
        self.section_end = self.t0 + budget
        self.doc: dict = {
            "schema": SCHEMA,
            "mode": mode,
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budget_s": budget,
            "sections": {},
        }
        self.write()

    def left(self) -> float:
        """Seconds left to the running section: its share of the budget, or less near the end."""
        now = time.monotonic()
        return min(self.budget - (now - self.t0), self.section_end - now)

    def start_section(self, name: str) -> None:
        share = 1.0 if self.mode == "interpret" else SHARE[name]  # CI's rehearsal runs every check
        self.section_end = time.monotonic() + share * self.budget

    def write(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.out_dir / "suite.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=1, default=str) + "\n")
        os.replace(tmp, self.out_dir / "suite.json")

    def record(self, name: str, result: dict, seconds: float) -> None:
        result = {"section": f"{LETTER[name]}) {name}", **result, "seconds": round(seconds, 1)}
        self.doc["sections"][name] = result
        self.doc["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        self.write()


def _run_section(suite: Suite, name: str, fn, *args) -> dict:
    t = time.monotonic()
    suite.start_section(name)
    if suite.left() <= 0:
        res = {"ok": None, "skipped": "time budget spent before this section"}
    else:
        try:
            res = fn(*args)
        except Exception as e:  # a failing section is a result; the next one still runs
            res = {
                "ok": False,
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-4000:],
            }
    suite.record(name, res, time.monotonic() - t)
    return res


def _summary_line(name: str, res: dict) -> str:
    if res.get("skipped"):
        state = f"SKIPPED ({res['skipped']})"
    else:
        state = "ok" if res.get("ok") else "FAILED"
    text = res.get("summary") or res.get("error", "")
    return f"  {LETTER[name]}) {name:<12} {state:<8} {text}"[:300]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/gpu-suite.sh", description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path, help="where suite.json (and the sanitizer/train logs) go")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer shapes, <= 3 minutes on one H100")
    mode.add_argument("--interpret", action="store_true", help="CPU rehearsal of a-c (TRITON_INTERPRET=1)")
    ap.add_argument("--only", action="append", choices=SECTIONS, help="run only these sections")
    ap.add_argument("--budget", type=float, help="override the wall-clock budget in seconds")
    args = ap.parse_args(argv)
    mode_name = "interpret" if args.interpret else "quick" if args.quick else "full"
    if args.interpret and not os.environ.get("TRITON_INTERPRET"):
        print("gpu-suite: --interpret needs TRITON_INTERPRET=1 set before python starts "
              "(scripts/gpu-suite.sh sets it). Fix: run it through scripts/gpu-suite.sh.", file=sys.stderr)  # fmt: skip
        return 2
    if not args.interpret and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("gpu-suite: TRITON_INTERPRET is set but --interpret is not: the GPU sections would time "
              "the interpreter. Fix: unset TRITON_INTERPRET, or pass --interpret.", file=sys.stderr)  # fmt: skip
        return 2

    from nsa.attention.gpusuite import checks

    suite = Suite(args.out_dir, mode_name, args.budget or BUDGET[mode_name])
    cfg = checks.Plan.for_mode(mode_name)
    chosen = args.only or (SECTIONS[:3] if args.interpret else SECTIONS)
    print(f"gpu-suite ({mode_name}): writing {args.out_dir / 'suite.json'}", flush=True)
    if not args.interpret and "env" in chosen:
        import torch

        if not torch.cuda.is_available():
            suite.record(
                "env", {"ok": False, "error": "no CUDA device: torch.cuda.is_available() is False"}, 0
            )
            print(_summary_line("env", suite.doc["sections"]["env"]), file=sys.stderr)
            return 1
    results = {}
    for name in SECTIONS:
        if name not in chosen:
            continue
        fn = checks.SECTION_FUNCS[name]
        results[name] = _run_section(suite, name, fn, cfg, suite)
        print(_summary_line(name, results[name]), flush=True)
    suite.doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    suite.doc["ok"] = all(r.get("ok") is not False for r in results.values())
    suite.write()
    print(f"gpu-suite: {'PASSED' if suite.doc['ok'] else 'FAILED'} in {suite.doc['elapsed_s']} s "
          f"-> {args.out_dir / 'suite.json'}", flush=True)  # fmt: skip
    return 0 if suite.doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
