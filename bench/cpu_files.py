"""CPU seconds per test file, every process a file starts included (the trainers under tmux, torchrun's
ranks and agents, TensorBoard, sshd's sessions), independent of what else loads the machine.

    sudo .venv/bin/python bench/cpu_files.py --out /tmp/cpu-e2e.json -- -n 2 --dist loadfile \
        --no-loadscope-reorder tests/e2e

Runs pytest (the arguments after --) inside a cgroup (v1 `cpuacct`, so root) and, through the plugin
below, moves each pytest worker into a child cgroup of its own for each test file it starts, and the
worker's sshd (the session-scoped `sshd` fixture) with it: a process inherits its parent's cgroup when
it forks, whatever it does after (a tmux server daemonizes, a trainer's parent is a tmux pane), so
each file's cgroup counts the CPU of everything that file started, and the run's cgroup the whole.
A pytest plugin alone cannot see that CPU: the processes under tmux are never reaped by pytest, so
`time -v` or RUSAGE_CHILDREN miss them. With --python, every python process also writes a line at
exit (a .pth of this venv while the run lasts): its argv, user and system CPU, whether it imported torch, and
the test it ran for (PYTEST_CURRENT_TEST, where inherited); a process killed by a signal writes none.

Prints, and writes to --out as JSON: wall seconds, pytest's exit code, CPU (user + system) of the
whole run and of each file, sorted, and the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup/cpuacct")
TICK = os.sysconf("SC_CLK_TCK")
SITE = """
import atexit, json, os, resource, sys, time
_log = "@LOG@"
try:  # only the processes of this run: another run's .pth imports this module too
    _mine = "cpuacct:/@GROUP@" in open("/proc/self/cgroup").read()
except OSError:
    _mine = False
if _mine:
    _t0 = time.time()
    def _w():
        try:
            r = resource.getrusage(resource.RUSAGE_SELF)
            rec = {"pid": os.getpid(), "argv": list(getattr(sys, "orig_argv", sys.argv))[:14],
                   "user": round(r.ru_utime, 2), "sys": round(r.ru_stime, 2),
                   "wall": round(time.time() - _t0, 2), "torch": "torch" in sys.modules,
                   "test": os.environ.get("PYTEST_CURRENT_TEST", "")[:150]}
            with open(_log, "a") as f:
                f.write(json.dumps(rec) + "\\n")
        except Exception:
            pass
    atexit.register(_w)
    _exit = os._exit
    def _exit_logged(code):  # the trainer leaves by os._exit (nsa/train/dist.py), which skips atexit
        _w()
        _exit(code)
    os._exit = _exit_logged
"""


def cpu(group: Path) -> tuple[float, float]:
    stat = dict(line.split() for line in (group / "cpuacct.stat").read_text().splitlines())
    return int(stat["user"]) / TICK, int(stat["system"]) / TICK


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--python", action="store_true", help="also log each python process (argv, CPU) at exit")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = [x for x in a.pytest_args if x != "--"] if a.pytest_args[:1] == ["--"] else a.pytest_args
    root = CGROUP_ROOT / f"cpu_files_{os.getpid()}"
    root.mkdir()
    # The plugin from a directory of its own: bench/ on PYTHONPATH would shadow the launcher package
    # with bench/launcher.py.
    site = Path(f"/tmp/{root.name}.site")
    site.mkdir()
    shutil.copy(Path(__file__).with_name("cpu_files_plugin.py"), site)
    env = dict(os.environ, CPU_FILES_CGROUP=str(root))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    pylog = a.out.with_suffix(".python.jsonl")
    pth = Path(sysconfig.get_paths()["purelib"]) / f"zz_{root.name}.pth"
    if a.python:
        # A .pth of this venv, not an environment variable: the trainers that the launcher starts
        # under tmux or through ssh get an environment of their own.
        pylog.unlink(missing_ok=True)
        (site / f"{root.name}_site.py").write_text(
            SITE.replace("@LOG@", str(pylog)).replace("@GROUP@", root.name)
        )
        pth.write_text(f"import sys; sys.path.append({str(site)!r}); import {root.name}_site\n")

    def enter() -> None:
        (root / "cgroup.procs").write_text(str(os.getpid()))

    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        rc = subprocess.call(
            [sys.executable, "-m", "pytest", "-p", "cpu_files_plugin", "-p", "no:cacheprovider", *args],
            env=env,
            preexec_fn=enter,
        )
    finally:
        pth.unlink(missing_ok=True)
    wall = time.monotonic() - t0
    time.sleep(2)  # what a file left running to die after its teardown
    files = {}
    lingering = {}
    for g in sorted(p for p in root.iterdir() if p.is_dir()):
        u, s = cpu(g)
        files[g.name.replace("__", "/")] = {"user": round(u, 2), "sys": round(s, 2), "cpu": round(u + s, 2)}
        left = (g / "cgroup.procs").read_text().split()
        if left:
            lingering[g.name] = [
                Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:200].decode()
                for p in left
                if Path(f"/proc/{p}").exists()
            ]
    u, s = cpu(root)
    rec = {
        "args": args,
        "rc": rc,
        "wall": round(wall, 1),
        "cpu": round(u + s, 1),
        "user": round(u, 1),
        "sys": round(s, 1),
        "load": [load0, os.getloadavg()[0]],
        "files": dict(sorted(files.items(), key=lambda kv: -kv[1]["cpu"])),
        "lingering": lingering,
    }
    a.out.write_text(json.dumps(rec, indent=1))
    print(
        f"rc {rc}  wall {wall:.1f} s  cpu {u + s:.1f} s (user {u:.1f}, sys {s:.1f})  load {load0:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    for name, f in rec["files"].items():
        print(f"{f['cpu']:8.1f}  {name}")
    if lingering:
        print("still running (left in their cgroups):", json.dumps(lingering, indent=1))
    return rc


if __name__ == "__main__":
    sys.exit(main())
