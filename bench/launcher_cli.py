"""Every nsa-launch command as a user runs it: one fresh CLI process each, on the loopback sshd.

    .venv/bin/python bench/launcher_cli.py [--repeats 3] [--checkout PATH]

Times `up` (to its return: first heartbeat seen), `status`, `logs -n 50`, `tunnel` (to the printed
URL), `restart` (to the restarted run's first heartbeat), `kill` (verified) and `doctor`, each as a new
`python -c "from launcher.cli import main; main()"` process with the launcher of `--checkout`
(default: this checkout), so the same script measures an older commit (check it out with `git
worktree add`; its own bench/ is not needed). A real sshd on 127.0.0.1 (tests/fixtures/sshd.py), a
private tmux server and a temp NSA_LAUNCH_HOME: it touches neither ~/.nsa-launch nor anyone's tmux.
The host python is this interpreter (a ready env). Prints one JSON row per command; record them in
bench/RESULTS.md with date, machine and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.sshd import SSHServer, free_port  # noqa: E402
from tests.fixtures.tmux import private_tmux_server  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--checkout", type=Path, default=ROOT, help="the checkout whose launcher is timed")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nsa-bench-cli-"))
    sshd = SSHServer(tmpdir=tmp / "sshd", port=free_port())
    sshd.setup()
    sshd.start()
    checkout = args.checkout.resolve()
    env = {**os.environ, "NSA_LAUNCH_HOME": str(tmp / "home"), "PYTHONPATH": str(checkout)}
    env.pop("NSA_LAUNCH_HOST", None)
    try:
        with private_tmux_server() as tmux:
            env["NSA_LAUNCH_TMUX_SOCKET"] = tmux.socket_name
            bench(sshd, tmp, env, checkout, args.repeats)
    finally:
        subprocess.run(_argv("ssh-close"), env=env, cwd=checkout, capture_output=True, timeout=60)
        sshd.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-c", "from launcher.cli import main; main()", *args]


def timed(env: dict[str, str], cwd: Path, *args: str) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(_argv(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - t0
    assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stderr[-2000:]}"
    return took


def timed_tunnel(env: dict[str, str], cwd: Path, run: str) -> float:
    """Seconds until `tunnel` prints its URL (TensorBoard started on the host, forward bound)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(_argv("tunnel", "--run", run), env=env, cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline()  # type: ignore[union-attr]
        took = time.perf_counter() - t0
        assert url.startswith("http://127.0.0.1:"), url
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    return took


def row(name: str, values: list[float], **extra: object) -> None:
    print(
        json.dumps(
            {
                "bench": name,
                "median_s": round(statistics.median(values), 3),
                "max_s": round(max(values), 3),
                "n": len(values),
                **extra,
            }
        ),
        flush=True,
    )


def bench(sshd: SSHServer, tmp: Path, env: dict[str, str], cwd: Path, repeats: int) -> None:
    host = ["--host", sshd.alias, "--ssh-config", str(sshd.ssh_config)]
    wd = str(tmp / "host")
    up = [*host, "--python", sys.executable, "--workdir", wd, "--set", "train.steps=100000"]
    up += ["--set", "train.save_every=10"]
    timed(env, cwd, "up", *up, "--name", "warm")  # the first up syncs the whole project
    timed(env, cwd, "kill", "--run", "warm")
    times: dict[str, list[float]] = {
        k: [] for k in ("up", "status", "logs", "tunnel", "restart", "kill", "doctor")
    }
    for i in range(repeats):
        run = f"cli-{i}"
        times["up"].append(timed(env, cwd, "up", *up, "--name", run))
        times["status"].append(timed(env, cwd, "status", "--run", run, "--json"))
        times["logs"].append(timed(env, cwd, "logs", "--run", run, "-n", "50"))
        times["tunnel"].append(timed_tunnel(env, cwd, run))
        times["restart"].append(timed(env, cwd, "restart", "--run", run))
        times["kill"].append(timed(env, cwd, "kill", "--run", run))
        times["doctor"].append(timed(env, cwd, "doctor", *host, "--python", sys.executable, "--workdir", wd))
    notes = {
        "up": "unchanged code, ready env: to up's return (first heartbeat seen)",
        "status": "new process; reuses the SSH master the earlier commands left",
        "logs": "`logs -n 50`, no follow",
        "tunnel": "to the printed URL: TensorBoard started on the host, local forward bound",
        "restart": "kill (verified), restart, first heartbeat of the restarted run",
        "kill": "TERM, grace, verified gone",
        "doctor": "--python given, project synced",
    }
    for name, values in times.items():
        row(f"cli_{name}", values, note=notes[name])


if __name__ == "__main__":
    main()
