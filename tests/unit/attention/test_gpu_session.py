"""scripts/gpu-session.sh, a GPU session's device work in one call, checked without a GPU: its argument
errors, `--plan`, the wheels (--no-deps, as scripts/gpu-suite.sh now installs them too), and the packing
into what the device tool returns (at most 8 files, directly in OUT, names of [A-Za-z0-9._-] only),
also when the call is killed mid-way. The steps' programs are replaced by a stand-in python (PYTHON):
it answers for the suite (`-m nsa.attention.gpusuite`) and kernel_probe.py by writing files shaped as
theirs are, hands pip and the summary's table to the real interpreter, and logs each call with its
PYTHONPATH (the 2026-11-26c call lost a step to kernel_probe.py run without the checkout on it)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SESSION = REPO / "scripts" / "gpu-session.sh"
SUITE = REPO / "scripts" / "gpu-suite.sh"
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
OUT_FILES = {"session.log", "quick.json", "speed.json", "train.json", "probes.jsonl", "logs.tar.gz"}

STUB = r"""#!{python}
import json, os, sys, time
from pathlib import Path
real, args = {python!r}, sys.argv[1:]
pythonpath = os.environ.get("PYTHONPATH", "")
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps({{"argv": args, "pythonpath": pythonpath, "pid": os.getpid()}}) + "\n")
if args[:1] == ["-c"]:
    if "torch" in args[1]:
        sys.exit(0)  # "a CUDA GPU is there"
    found = any((Path(p) / "pydantic" / "__init__.py").is_file() for p in pythonpath.split(":") if p)
    sys.exit(0 if found or os.environ.get("STUB_HAS_PYDANTIC") else 1)
if args[:2] == ["-m", "pip"] or args[:1] == ["-"]:
    os.execv(real, [real, *args])
if args[:2] == ["-m", "nsa.attention.gpusuite"]:
    out, rest = Path(args[2]), args[3:]
    sections = [rest[i + 1] for i, a in enumerate(rest) if a == "--only"]
    out.mkdir(parents=True, exist_ok=True)
    doc = {{"schema": 2, "command": " ".join(args), "sections": {{s: {{"ok": True}} for s in sections}}}}
    if "speed" in sections:
        doc["sections"]["speed"]["records"] = [
            {{"shape": "m7c", "T": T, "nsa_over_flash_fwd_bwd": r, "nsa_fwd_bwd_ms": 1.0, "sdpa_flash_fwd_bwd_ms": 2.0}}
            for T, r in ((8192, 0.92), (65536, 0.25))]
    if "train" in sections:
        time.sleep(float(os.environ.get("STUB_TRAIN_SLEEP", "0")))
        (out / "train-nsa-2048-ac_none-compiled.log").write_text("step 1\n")
        (out / "train" / "nsa-2048-ac_none-compiled").mkdir(parents=True, exist_ok=True)
        (out / "train" / "nsa-2048-ac_none-compiled" / "metrics.jsonl").write_text('{{"step": 1}}\n')
    (out / "suite.json").write_text(json.dumps(doc))
    print("gpu-suite: PASSED")
    sys.exit(0)
if args and args[0].endswith(("bench/kernel_probe.py", "bench/step_host.py")):
    print(json.dumps({{"probe": args[2], "ms": 1.0}}))
    print("probe log", file=sys.stderr)
    sys.exit(0)
print("stand-in python: unexpected call", args, file=sys.stderr)
sys.exit(3)
"""


@pytest.fixture
def stub(tmp_path) -> dict[str, str]:
    """The environment that runs the scripts with the stand-in python; its calls go to tmp/calls.jsonl."""
    path = tmp_path / "python"
    path.write_text(STUB.format(python=sys.executable))
    path.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STUB_HAS_PYDANTIC")}
    return {**env, "PYTHON": str(path), "STUB_LOG": str(tmp_path / "calls.jsonl")}


def calls(tmp_path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]


def fake_wheels(folder: Path) -> Path:
    """A pure wheel of `pydantic` that asks for a typing-extensions no folder has: installable with
    --no-deps only, as the device's folder is (its pydantic wants the image's typing-extensions)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = "pydantic-0.0.1.dist-info"
    files = {
        "pydantic/__init__.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: pydantic\nVersion: 0.0.1\nRequires-Dist: typing-extensions>=99\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / "pydantic-0.0.1-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return folder


def session(
    out: Path, *args: str, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run([str(SESSION), str(out), *args], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=REPO)  # fmt: skip


def check_returned(out: Path) -> set[str]:
    """What the device tool would bring back: at most 8 plain files, none in a folder, plain names."""
    entries = list(out.iterdir())
    assert len(entries) <= 8, entries
    for e in entries:
        assert e.is_file() and not e.is_symlink(), e
        assert OUT_NAME.match(e.name), e.name
        assert e.stat().st_size < 16 * 2**20, e
    return {e.name for e in entries}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "OUT is missing"),
        (("--plan",), "the first argument is OUT"),
        (("{out}", "--budget", "100"), "at least 300"),
        (("{out}", "--budget", "5m"), "whole seconds"),
        (("{out}", "--budget", "541", "--plan"), "at most 540"),
        (("{out}", "--budget"), "--budget needs seconds"),
        (("{out}", "--quick"), "unknown argument --quick"),
        (("{out}", "--work", "{out}/w"), "inside OUT"),
        (("{out}/o", "--work", "{out}"), "inside --work"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(tmp_path, args, message) -> None:
    argv = [a.format(out=tmp_path / "o") for a in args]
    res = subprocess.run([str(SESSION), *argv], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2, res
    assert message in res.stderr and "usage: scripts/gpu-session.sh OUT" in res.stderr, res.stderr


def test_an_out_folder_with_files_in_it_is_refused(tmp_path, stub) -> None:
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "old.json").write_text("{}")
    res = session(tmp_path / "o", "--work", str(tmp_path / "w"), env=stub)
    assert res.returncode == 2 and "is not empty" in res.stderr
    assert not (tmp_path / "calls.jsonl").exists()  # nothing ran


def test_plan_splits_the_budget_in_order_of_value_and_the_speed_step_fits_its_grid(tmp_path, capsys) -> None:
    res = session(tmp_path / "never", "--plan")
    assert res.returncode == 0, res.stderr
    *steps, total = [json.loads(x) for x in res.stdout.splitlines()]
    assert [s["step"] for s in steps] == ["quick", "speed", "probes", "train"]
    assert sum(s["allot_s"] for s in steps) == total["budget_s"] == 540
    assert total["budget_s"] + 45 <= total["call_timeout_s"] <= 600  # one device call, the wheels, packing
    assert set(total["out_files"]) == OUT_FILES and len(total["out_files"]) <= 8
    for s in steps:
        assert 0 < s["budget_s"] < s["allot_s"], s  # the margin for the process start
        assert s["command"].endswith(f"--budget {s['budget_s']}"), s
    assert not (tmp_path / "never").exists()
    # the speed step's suite runs the whole grid in its budget by the suite's own estimates
    from nsa.attention.gpusuite.__main__ import main

    speed = next(s for s in steps if s["step"] == "speed")
    argv = [
        str(tmp_path / "s"),
        "--only",
        "env",
        "--only",
        "speed",
        "--budget",
        str(speed["budget_s"]),
        "--plan",
    ]
    assert main(argv) == 0
    plan = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    grid = next(x for x in plan if x.get("section") == "speed")
    assert grid["skipped_for_time"] == [] and len(grid["ran"]) == 10, grid
    # a smaller budget shrinks every share, the order stays
    small = [
        json.loads(x) for x in session(tmp_path / "never", "--plan", "--budget", "300").stdout.splitlines()
    ]
    assert [s["allot_s"] for s in small[:-1]] == [41, 75, 161, 23] and small[-1]["call_timeout_s"] == 360


def test_a_work_folder_this_script_did_not_make_is_not_emptied(tmp_path, stub) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "precious.txt").write_text("keep")
    res = session(tmp_path / "o", "--work", str(tmp_path / "w"), env=stub)
    assert res.returncode == 2 and "did not write" in res.stderr
    assert (tmp_path / "w" / "precious.txt").read_text() == "keep"


def test_a_work_path_that_is_a_file_is_refused_not_deleted(tmp_path, stub) -> None:
    (tmp_path / "precious.txt").write_text("keep")
    res = session(tmp_path / "o", "--work", str(tmp_path / "precious.txt"), env=stub)
    assert res.returncode == 2 and "is a file" in res.stderr, res
    assert (tmp_path / "precious.txt").read_text() == "keep"


def test_out_inside_work_through_a_symlink_is_refused(tmp_path, stub) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / ".gpu-session").touch()  # a work folder an earlier session made
    (tmp_path / "w" / "o").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "w" / "o")
    res = session(tmp_path / "link", "--work", str(tmp_path / "w"), env=stub)
    assert res.returncode == 2 and "inside --work" in res.stderr, res
    assert (tmp_path / "w" / "o").is_dir()


def test_no_pydantic_and_no_wheels_exits_2_and_says_how_to_fix_it(tmp_path, stub) -> None:
    (tmp_path / "empty").mkdir()
    res = session(
        tmp_path / "o", "--wheels", str(tmp_path / "empty"), "--work", str(tmp_path / "w"), env=stub
    )
    assert res.returncode == 2, res
    assert "cannot import pydantic" in res.stderr and "no wheels" in res.stderr and ".whl/" in res.stderr
    assert check_returned(tmp_path / "o") <= OUT_FILES  # the log of what happened still comes back
    assert not any("nsa.attention.gpusuite" in " ".join(c["argv"]) for c in calls(tmp_path))


def test_a_whole_session_packs_every_step_into_six_plain_files(tmp_path, stub) -> None:
    wheels = fake_wheels(tmp_path / "whl")
    res = session(
        tmp_path / "o", "--budget", "300", "--wheels", str(wheels), "--work", str(tmp_path / "w"), env=stub
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out = tmp_path / "o"
    assert check_returned(out) == OUT_FILES
    log = calls(tmp_path)
    # the wheels: --no-deps (the fake pydantic asks for a typing-extensions that is nowhere)
    pip = [c["argv"] for c in log if c["argv"][:2] == ["-m", "pip"]]
    assert len(pip) == 1 and "--no-deps" in pip[0] and "--no-index" in pip[0]
    site = str(tmp_path / "w" / "site")
    # every step's program ran with the checkout first on PYTHONPATH and the wheels' site on it
    steps = [
        c for c in log
        if c["argv"][:2] == ["-m", "nsa.attention.gpusuite"] or any(b in c["argv"][0] for b in ("kernel_probe", "step_host"))
    ]  # fmt: skip
    queue = subprocess.run([str(REPO / "scripts" / "gpu-probes.sh"), str(tmp_path), "--list"], capture_output=True,
                           text=True, check=True).stdout.split("\n")  # fmt: skip
    names = [line.split(" ")[0] for line in queue if line]
    assert len(steps) == 3 + len(names)
    for c in steps:
        parts = c["pythonpath"].split(":")
        assert parts[0] == str(REPO) and site in parts, c
    suites = [c["argv"] for c in steps if c["argv"][1] == "nsa.attention.gpusuite"]
    assert [a[a.index("--budget") + 1] for a in suites] and all("--budget" in a for a in suites)
    assert [json.loads((out / f"{n}.json").read_text())["sections"].keys() for n in ("quick", "speed", "train")] == [
        {"env", "numerics", "determinism"}, {"env", "speed"}, {"env", "train"}]  # fmt: skip
    rows = [json.loads(x) for x in (out / "probes.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == names and all(r["ms"] == 1.0 for r in rows)
    with tarfile.open(out / "logs.tar.gz") as tar:
        members = set(tar.getnames())
    assert {"./t/train-nsa-2048-ac_none-compiled.log", "./t/train/nsa-2048-ac_none-compiled/metrics.jsonl",
            "./speed.out", "./probes.out"} <= members  # fmt: skip
    assert {f"./p/{n}.err" for n in names} <= members and not any("/site/" in m for m in members)
    text = (out / "session.log").read_text()
    assert text.count('"rc": 0') == 4 and "every step passed" in text
    assert "| ratio | 0.92 | 0.25 |" in text  # the NSA/FA2 line of the speed step
    assert 'carry [".whl"], timeout_s 360' in text and "bench/gpu/" in text
    assert "| ratio | 0.92 | 0.25 |" in res.stdout  # and on stdout, the device reply's tail


def test_a_call_killed_in_its_last_step_still_returns_what_the_steps_before_packed(tmp_path, stub) -> None:
    wheels = fake_wheels(tmp_path / "whl")
    env = {**stub, "STUB_TRAIN_SLEEP": "60"}
    proc = subprocess.Popen([str(SESSION), str(tmp_path / "o"), "--wheels", str(wheels), "--work", str(tmp_path / "w")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the train step's suite is running
            if (tmp_path / "calls.jsonl").exists() and any("train" in c["argv"] for c in calls(tmp_path)):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the train step never started")
        time.sleep(0.5)
    finally:  # as the device does at the call's limit: everything of the call, at once
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for c in calls(tmp_path):  # `timeout` puts each step in its own group: end the stand-in we started
            if "train" in c["argv"]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(c["pid"], signal.SIGKILL)
    names = check_returned(tmp_path / "o")
    assert names == OUT_FILES - {"train.json"}, names
    assert not (tmp_path / "o" / "train.json").exists()
    text = (tmp_path / "o" / "session.log").read_text()
    assert '"step": "probes", "rc": 0' in text and '"step": "train"' not in text


def test_gpu_suite_installs_a_wheel_folder_no_deps_and_refuses_one_without_wheels(tmp_path, stub) -> None:
    """scripts/gpu-suite.sh's own fallback: it asked pip to resolve pydantic's dependencies from the
    folder (--find-links), which cannot work with --target and only the wheels the image lacks."""
    wheels = fake_wheels(tmp_path / "whl")
    res = subprocess.run([str(SUITE), str(tmp_path / "s"), "--only", "env", "--wheels", str(wheels)],
                         capture_output=True, text=True, env=stub, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    log = calls(tmp_path)
    pip = [c["argv"] for c in log if c["argv"][:2] == ["-m", "pip"]]
    assert len(pip) == 1 and "--no-deps" in pip[0] and "--find-links" not in pip[0]
    suite = next(c for c in log if c["argv"][:2] == ["-m", "nsa.attention.gpusuite"])
    assert str(tmp_path / "s" / "pydeps") in suite["pythonpath"].split(":")
    assert (tmp_path / "s" / "pydeps" / "pydantic" / "__init__.py").is_file()
    (tmp_path / "none").mkdir()
    res = subprocess.run([str(SUITE), str(tmp_path / "s2"), "--wheels", str(tmp_path / "none")],
                         capture_output=True, text=True, env=stub, timeout=60)  # fmt: skip
    assert res.returncode == 2 and "no wheels" in res.stderr, res.stderr


def test_gpu_suite_bad_wheel_arguments_exit_2_with_a_message(tmp_path, stub) -> None:
    """--wheels without its folder, and a wheel pip refuses, are bad input (2 and how to fix it), not
    set -e's bare exit 1 (the missing value's `${2:?}`, pip's own status)."""
    res = subprocess.run([str(SUITE), str(tmp_path / "s"), "--wheels"], capture_output=True, text=True,
                         env=stub, timeout=60)  # fmt: skip
    assert res.returncode == 2 and "--wheels needs a folder" in res.stderr and "usage:" in res.stderr, res
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "broken-1.0-py3-none-any.whl").write_text("not a zip")
    res = subprocess.run([str(SUITE), str(tmp_path / "s"), "--wheels", str(tmp_path / "bad")],
                         capture_output=True, text=True, env=stub, timeout=120)  # fmt: skip
    assert res.returncode == 2 and "could not install the wheels" in res.stderr, res
    assert not any(c["argv"][:2] == ["-m", "nsa.attention.gpusuite"] for c in calls(tmp_path))
