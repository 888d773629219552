"""`python -m nsa.attention.gpusuite OUT_DIR [--quick|--interpret]` (what scripts/gpu-suite.sh runs).

Owns the run: sections in order, each given its share of what is left of the time budget (`budget`:
shares, per-item estimates, the clock; an item whose estimate no longer fits is listed as skipped for
time, a section that could run none is skipped, not failed), each result written into
OUT_DIR/suite.json the moment it finishes (atomically: a run cut short by the clock or a crash keeps
every finished section), and a short summary on stdout. A section that fails is recorded with its
error and the run goes on. Sections (docs/gpu-suite.md):
  a env  b numerics  c determinism  d sanitizer  e speed  f train
--plan prints, without a GPU, what the run would do in its budget if every item took its estimate.
--interpret runs a-c on CPU under TRITON_INTERPRET=1 with small shapes and the honest-bf16
interpreter patch, so CI proves the suite itself. Exit 0 when every section that ran passed, 1
otherwise, 2 on bad input. It installs nothing and writes only under OUT_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

from nsa.attention.gpusuite.budget import (
    BUDGET,
    LETTER,
    ONE_ITEM_S,
    SANITIZER_TOOL_S,
    SECTIONS,
    SHARE,
    Item,
    Suite,
    all_skipped,
    simulate,
)


def _run_section(suite: Suite, name: str, fn, *args) -> dict:
    t = suite.clock()
    suite.start_section(name)
    if SHARE.get(suite.mode, {}).get(name, 1.0) == 0:
        res = {"ok": None, "skipped": f"not run by --{suite.mode}"}
    elif suite.left() <= 0:
        res = {"ok": None, "skipped": "time budget spent before this section"}
    else:
        try:
            res = all_skipped(fn(*args))
        except Exception as e:  # a failing section is a result; the next one still runs
            res = {
                "ok": False,
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-4000:],
            }
    suite.record(name, res, suite.clock() - t)
    return res


def section_items(plan, name: str) -> list[Item]:
    """What each section runs, with its estimated seconds (the dry run's view of the sections)."""
    from nsa.attention.gpusuite import checks, gpu, training

    if name == "numerics":
        return checks.numerics_items(plan)
    if name == "speed":
        return gpu.speed_items(plan)
    if name == "train":
        return [Item(r["name"], r["estimate_s"]) for r in training.train_runs(plan)]
    if name == "sanitizer":
        return [Item(tool, SANITIZER_TOOL_S) for tool in ("memcheck", "racecheck")]
    return [Item(name, ONE_ITEM_S[name])]


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
    ap.add_argument("--plan", action="store_true", help="print what the run would do in its budget if every "
                    "item took its estimate (JSON, one line a section, then the total); no GPU, writes no file")  # fmt: skip
    ap.add_argument("--budget", type=float, help="wall-clock budget in seconds (default: 480, --quick 180, "
                    "--interpret 600), split among the chosen sections by their shares")  # fmt: skip
    args = ap.parse_args(argv)
    mode_name = "interpret" if args.interpret else "quick" if args.quick else "full"
    if args.budget is not None and not args.budget > 0:
        print(f"gpu-suite: --budget {args.budget:g} is not a number of seconds > 0. Fix: pass e.g. "
              f"--budget {BUDGET[mode_name]:g} (the {mode_name} run's default), or leave it out.", file=sys.stderr)  # fmt: skip
        return 2
    chosen = tuple(args.only or (SECTIONS[:3] if args.interpret else SECTIONS))
    if args.plan:
        from nsa.attention.gpusuite import checks

        plan = checks.Plan.for_mode(mode_name)
        dry = simulate(mode_name, args.budget or BUDGET[mode_name], chosen, lambda n: section_items(plan, n))
        for name, sec in dry["sections"].items():
            print(json.dumps({"section": name, **sec}))
        print(json.dumps({k: v for k, v in dry.items() if k != "sections"}))
        return 0
    if args.interpret and not os.environ.get("TRITON_INTERPRET"):
        print("gpu-suite: --interpret needs TRITON_INTERPRET=1 set before python starts "
              "(scripts/gpu-suite.sh sets it). Fix: run it through scripts/gpu-suite.sh.", file=sys.stderr)  # fmt: skip
        return 2
    if not args.interpret and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("gpu-suite: TRITON_INTERPRET is set but --interpret is not: the GPU sections would time "
              "the interpreter. Fix: unset TRITON_INTERPRET, or pass --interpret.", file=sys.stderr)  # fmt: skip
        return 2

    from nsa.attention.gpusuite import checks

    command = shlex.join(
        ["python", "-m", "nsa.attention.gpusuite", *(sys.argv[1:] if argv is None else argv)]
    )
    suite = Suite(args.out_dir, mode_name, args.budget or BUDGET[mode_name], chosen, command=command)
    cfg = checks.Plan.for_mode(mode_name)
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
    n_skipped = sum(r.get("ok") is None for r in results.values())
    note = f" ({n_skipped} section(s) skipped)" if n_skipped else ""
    print(f"gpu-suite: {'PASSED' if suite.doc['ok'] else 'FAILED'}{note} in {suite.doc['elapsed_s']} s "
          f"-> {args.out_dir / 'suite.json'}", flush=True)  # fmt: skip
    return 0 if suite.doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
