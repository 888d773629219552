"""scripts/gpu-probes.sh, the GPU probe queue: every step's kernel_probe arguments name variants that
exist (a typo would spend a scarce GPU lease timing the baseline alone), checked without a GPU."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.bench import load_bench

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gpu-probes.sh"


_END = "\n--- end of one script ---\n"
_RUN_EACH = f"""import json, runpy, sys
for argv in json.loads(sys.argv[1]):
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
    print({_END!r}, end="", flush=True)
"""


def _queue(tmp_path) -> list[tuple[str, int, list[str]]]:
    out = subprocess.run([str(SCRIPT), str(tmp_path), "--list"], capture_output=True, text=True, check=True)
    rows = []
    for line in out.stdout.splitlines():
        name, limit, args = line.split(" ", 2)
        rows.append((name, int(limit), shlex.split(args)))
    return rows


def test_every_step_of_the_queue_runs_real_variants_beside_the_baseline(tmp_path, capsys):
    probe = load_bench("kernel_probe")
    queue = _queue(tmp_path)
    # what the 2026-11-27 H100 left unmeasured: the key-major forward's merging forced pass (shipped
    # after it, on M7C's every layer), the M7C selection's bulk-copied key tile (built for the 64k
    # target), the paper shape's select_shm flip at 32k, its split loop; then the training steps' host time
    assert [n for n, _, _ in queue] == [
        "fwd_forced_merge",
        "select_tma",
        "select_shm",
        "select_split",
        "step_host_nsa",
        "step_host_dense",
        "step_host_cudagraphs",
    ]
    # limits from that H100's 10-22 s a step, upper bounds: the steps run in this order until --budget
    # (default 420) is spent; at their limits every step up to the dense training step fits it (the
    # checks of shipped settings first), the last three run on what the others' real times leave
    names = [n for n, _, _ in queue]
    assert all(45 <= limit <= 75 for _, limit, _ in queue)
    assert sum(limit for _, limit, _ in queue[: names.index("step_host_dense") + 1]) <= 420
    # Another bench script (the training step's host time): its dry runs, each run as __main__ as the
    # queue runs it, all in one interpreter (runpy), so they cost one torch start, not one each (three
    # processes took ~15 s of CPU, most of it their imports: bench/RESULTS.md "citime2").
    scripted = [(name, args) for name, _, args in queue if args[0].startswith("@")]
    bench = Path(__file__).resolve().parents[3] / "bench"
    argvs = [[str(bench / args[0][1:]), *args[1:], "--dry-run"] for _, args in scripted]
    run = subprocess.run([sys.executable, "-c", _RUN_EACH, json.dumps(argvs)], capture_output=True,
                         text=True, cwd=SCRIPT.parents[1])  # fmt: skip
    assert run.returncode == 0, run.stderr[-1000:]
    outs = run.stdout.split(_END)
    assert len(outs) == len(scripted) + 1, run.stdout[-1000:]  # each ran to its end
    for (name, _), out in zip(scripted, outs):
        assert json.loads(out.strip().splitlines()[-1])["dry_run"] is True, name
    for name, _, args in queue:
        if args[0].startswith("@"):
            continue
        capsys.readouterr()
        assert probe.main([*args, "--dry-run"]) == 0, name
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        for shape in {r["shape"] for r in rows}:
            here = [r for r in rows if r["shape"] == shape]
            assert any(r["changes"] == {} for r in here), (name, shape)  # the baseline
            assert any(r["changes"] for r in here), (name, shape)  # and a variant that changes something


def test_bad_arguments_exit_2_and_start_nothing(tmp_path):
    for args in (["--budget", "5"], ["--budget", "x"], ["--budget"], ["--bogus"], []):
        run = subprocess.run([str(SCRIPT), *([str(tmp_path / "o")] if args != [] else []), *args],
                             capture_output=True, text=True)  # fmt: skip
        assert run.returncode == 2, args
        assert run.stderr.strip(), args
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "probe,switch", [("rope", "fuse_q_grad"), ("gate", "fold_gate"), ("gate", "fold_delta")]
)
def test_a_switch_probe_times_both_paths(capsys, probe, switch):
    """bench/kernel_probe.py --only rope / gate: the shipped setting and its switch off (fused.FUSE_Q_GRAD,
    gated.FOLD_GATE, gated.FOLD_DELTA: the path every GPU run measured), at each shape (checked by its
    dry run: no GPU)."""
    kp = load_bench("kernel_probe")
    assert kp.main(["--only", probe, "--dry-run", "--match", switch]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["shape"] for r in rows} == {"m7c", "paper"}
    assert sorted(json.dumps(r["changes"]) for r in rows) == [json.dumps({switch: False})] * 2 + ["{}"] * 2


def test_the_gate_probe_times_each_variant_under_its_switches(monkeypatch):
    """bench/kernel_probe.py's gate rows (`_switch_rows` with FOLD_DELTA beside FOLD_GATE): each variant
    timed with the switches it names set and the other at its shipped value, both restored after;
    the timer stands in for the GPU's (it records the switches it runs under)."""
    from nsa.attention.triton import gated

    kp = load_bench("kernel_probe")
    seen = []
    monkeypatch.setattr(kp, "_time", lambda fn: seen.append((gated.FOLD_GATE, gated.FOLD_DELTA)) or 1.0)
    rows = list(kp._switch_rows("gate", gated, "FOLD_GATE", kp.GATE_VARIANTS, "m7c", 8, 8192, None, None, None,
                                more=("FOLD_DELTA",)))  # fmt: skip
    assert [r["variant"] for r in rows] == [{}, {"fold_gate": False}, {"fold_delta": False}]
    assert seen == [(True, True)] * 2 + [(False, True)] * 2 + [(True, False)] * 2  # fwd, fwd+bwd each
    assert (gated.FOLD_GATE, gated.FOLD_DELTA) == (True, True)
