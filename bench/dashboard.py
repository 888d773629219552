"""Dashboard speed and weight against a real local run: startup, log latency, CPU, memory.

Starts a real `cpu`-profile run with `nsa-launch up` (isolated registry in a temp dir, private tmux
socket), runs `nsa-launch dashboard --run R` as its own process in a tmux pane (a real terminal),
and measures what a person would see, reading the screen with `tmux capture-pane`:

- startup_s: process spawn -> the run's row shows on screen;
- log_latency_s: a line appended to the run's train.log -> the line on screen (median, max);
- cpu idle: the dashboard's CPU share over a window with the run killed (nothing happening), and
  while the run trains; `cpu_pct_self` is the dashboard process, `cpu_pct_with_agent` adds the
  status/metrics agent subprocesses it spawned (local transport: one `python -m launcher.host` a poll);
- flood: the same under a 2,000 lines/s writer, plus the latency of a marker written at its end;
- memory: RSS before and after 1,000,000 lines pushed through the log pane.

The training run and the dashboard share this machine's cores, so on a 2-core box the numbers are
pessimistic: on a GPU host the trainer is not on the laptop that watches it.

    .venv/bin/python bench/dashboard.py            # full (about 2 minutes)
    .venv/bin/python bench/dashboard.py --quick    # shorter windows, 100k lines
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLK = os.sysconf("SC_CLK_TCK")


def emit(row: dict) -> None:
    print(json.dumps(row, sort_keys=True), flush=True)


class Term:
    def __init__(self, socket: str):
        self.socket = socket

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False
        ).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "dash:0.0")

    def wait(self, pred, timeout: float, what: str, interval: float = 0.01) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if pred(self.screen()):
                return time.monotonic()
            time.sleep(interval)
        raise SystemExit(f"bench: timed out after {timeout}s waiting for {what}:\n{self.screen()}")


def cpu_ticks(pid: int) -> tuple[int, int]:
    """(self utime+stime, reaped children cutime+cstime) in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_window(pid: int, seconds: float) -> dict:
    s0, c0 = cpu_ticks(pid)
    t0 = time.monotonic()
    time.sleep(seconds)
    s1, c1 = cpu_ticks(pid)
    wall = time.monotonic() - t0
    return {
        "cpu_pct_self": round(100 * (s1 - s0) / CLK / wall, 1),
        "cpu_pct_with_agent": round(100 * ((s1 - s0) + (c1 - c0)) / CLK / wall, 1),
        "window_s": round(wall, 1),
    }


def dashboard_pid(term: Term) -> int:
    pane = int(term.tmux("display", "-p", "-t", "dash:0.0", "#{pane_pid}").strip())
    if b"dashboard" in Path(f"/proc/{pane}/cmdline").read_bytes():
        return pane  # the shell exec'd the command itself
    for _ in range(100):
        for child in Path("/proc").iterdir():
            if not child.name.isdigit():
                continue
            try:
                stat = (child / "stat").read_text()
                cmd = (child / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pane and b"dashboard" in cmd:
                return int(child.name)
        time.sleep(0.05)
    raise SystemExit("bench: cannot find the dashboard process")


def write_lines(path: Path, lines: list[str]) -> None:
    with open(path, "a") as f:
        f.write("".join(ln + "\n" for ln in lines))


def latency(term: Term, log: Path, tag: str, timeout: float = 30) -> float:
    marker = f"bench-marker-{tag}-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    write_lines(log, [marker])
    return term.wait(lambda s: marker in s, timeout, f"marker {tag}") - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    window = 4.0 if args.quick else 10.0
    million = 100_000 if args.quick else 1_000_000
    load = Path("/proc/loadavg").read_text().split()[0]

    home = Path(tempfile.mkdtemp(prefix="nsa-dash-bench-"))
    socket = f"nsa-dash-bench-{os.getpid()}"
    run = f"dash-bench-{os.getpid()}"
    env = {**os.environ, "NSA_LAUNCH_HOME": str(home), "NSA_LAUNCH_TMUX_SOCKET": socket}
    os.environ.update(env)
    nsa = [sys.executable, "-c", "from launcher.cli import main; main()"]
    term = Term(socket)
    try:
        up = subprocess.run(
            [*nsa, "up", "--name", run, "--set", "train.steps=100000"],
            env=env,
            capture_output=True,
            text=True,
        )
        if up.returncode != 0:
            raise SystemExit(f"bench: nsa-launch up failed:\n{up.stdout}\n{up.stderr}")
        # Asked through the CLI: importing `launcher` here would find bench/launcher.py first.
        st = subprocess.run([*nsa, "status", "--run", run, "--json"], env=env, capture_output=True, text=True)
        log = Path(json.loads(st.stdout)[0]["run_dir"]) / "train.log"
        cmd = " ".join(shlex.quote(a) for a in [*nsa, "dashboard", "--run", run])
        term.tmux("new-session", "-d", "-s", "dash", "-x", "160", "-y", "48", "sleep 600")
        term.tmux("resize-window", "-t", "dash", "-x", "160", "-y", "48")
        t0 = time.monotonic()
        term.tmux(
            "respawn-pane",
            "-k",
            "-t",
            "dash:0.0",
            *[f"-e{k}={v}" for k, v in env.items() if k.startswith("NSA_")],
            cmd,
        )
        t1 = term.wait(lambda s: f" {run} " in s and "running" in s, 30, "the run row")
        pid = dashboard_pid(term)
        emit({"metric": "startup_s", "value": round(t1 - t0, 3), "target": "<= 2 s", "load": load})

        term.wait(lambda s: "[nsa] step" in s, 60, "trainer lines")
        lats = [latency(term, log, f"l{i}") for i in range(10)]
        emit(
            {
                "metric": "log_latency_s",
                "median": round(statistics.median(lats), 3),
                "max": round(max(lats), 3),
                "n": len(lats),
                "target": "<= 1 s",
                "load": load,
            }
        )

        emit({"metric": "cpu_while_training", **cpu_window(pid, window), "refresh_s": 1.0, "load": load})

        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"""
import time, sys
n, t0 = 0, time.monotonic()
with open({str(log)!r}, "a", buffering=1) as f:
    while time.monotonic() - t0 < {window + 1}:
        for _ in range(100):
            f.write(f"[rank{{n % 2}}]: flood line {{n}} " + "x" * 60 + "\\n"); n += 1
        time.sleep(max(0.0, t0 + n / 2000 - time.monotonic()))
print(n / (time.monotonic() - t0))
""",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
        flood_cpu = cpu_window(pid, window - 1.5)
        # Is the UI responsive mid-flood? A key press -> the help modal on screen.
        t0 = time.monotonic()
        term.tmux("send-keys", "-t", "dash:0.0", "?")
        key_lat = term.wait(lambda s: "dashboard — keys" in s, 30, "help modal during the flood") - t0
        term.tmux("send-keys", "-t", "dash:0.0", "Escape")
        rate = float(proc.communicate()[0].strip())
        # A line written once the flood stops: has the backlog been drained?
        after_lat = latency(term, log, "after-flood")
        emit({"metric": "cpu_under_log_flood", **flood_cpu, "lines_per_s": round(rate),
              "key_to_screen_s": round(key_lat, 3), "after_flood_line_latency_s": round(after_lat, 3),
              "target": "UI responsive", "load": load})  # fmt: skip

        rss0 = rss_mb(pid)
        t0 = time.monotonic()
        batch = 10_000
        line = "[rank0]: " + "m" * 70
        for _ in range(million // batch):
            write_lines(log, [line] * batch)
        lat = latency(term, log, "million", timeout=600)
        emit(
            {
                "metric": "memory_after_log_lines",
                "lines": million,
                "rss_before_mb": round(rss0, 1),
                "rss_after_mb": round(rss_mb(pid), 1),
                "seconds_to_drain": round(time.monotonic() - t0, 1),
                "last_marker_latency_s": round(lat, 3),
                "load": load,
            }
        )

        subprocess.run([*nsa, "kill", "--run", run], env=env, capture_output=True)
        term.wait(lambda s: "killed" in s, 30, "state killed")
        time.sleep(2)
        emit(
            {
                "metric": "cpu_idle_nothing_happening",
                **cpu_window(pid, window),
                "refresh_s": 1.0,
                "target": "< 10 % of a core",
                "load": Path("/proc/loadavg").read_text().split()[0],
            }
        )
    finally:
        subprocess.run([*nsa, "kill", "--run", run], env=env, capture_output=True)
        term.tmux("kill-server")
        shutil.rmtree(ROOT / "runs" / run, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
