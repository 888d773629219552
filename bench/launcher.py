"""Launcher speed on the loopback sshd: up -> "torchrun started", status, one-file sync, logs -f, kill.

    .venv/bin/python bench/launcher.py [--repeats 5]

Starts a real sshd on 127.0.0.1 (tests/fixtures/sshd.py) and a private tmux server, so it touches
neither ~/.nsa-launch nor anyone's tmux. The host is this machine: a synced workdir in a temp dir and
this interpreter as the host python (a ready env). Prints one JSON row per measurement, with the
issue's target; record the rows in bench/RESULTS.md with date, machine and load average. The SSH
master connections of `status` (launcher/ssh/openssh.py) live under the temp NSA_LAUNCH_HOME and are
stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.launch.execute import execute, wait_first_heartbeat  # noqa: E402
from launcher.launch.plan import UpOptions, plan_run  # noqa: E402
from launcher.run import control, registry  # noqa: E402
from launcher.ssh import openssh  # noqa: E402
from launcher.ssh.hosts import parse_target  # noqa: E402
from launcher.ssh.remote import agent_call, close_all, transport_for  # noqa: E402
from launcher.ssh.sync import project_files, sync  # noqa: E402
from tests.fixtures.sshd import SSHServer, free_port  # noqa: E402
from tests.fixtures.tmux import private_tmux_server  # noqa: E402


def row(name: str, values: list[float], target: float, **extra: object) -> None:
    med = statistics.median(values)
    print(
        json.dumps(
            {
                "bench": name,
                "median_s": round(med, 3),
                "max_s": round(max(values), 3),
                "n": len(values),
                "target_s": target,
                "meets_target": med <= target,
                **extra,
            }
        ),
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nsa-bench-launcher-"))
    sshd = SSHServer(tmpdir=tmp / "sshd", port=free_port())
    sshd.setup()
    sshd.start()
    try:
        with private_tmux_server() as tmux:
            os.environ["NSA_LAUNCH_HOME"] = str(tmp / "home")
            os.environ["NSA_LAUNCH_TMUX_SOCKET"] = tmux.socket_name
            bench(sshd, tmp, args.repeats)
    finally:
        close_all()
        openssh.stop_masters(tmp / "home")
        sshd.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def up(sshd: SSHServer, wd: Path, name: str, steps: int = 100000) -> tuple[registry.RunRecord, float]:
    plan = plan_run(
        UpOptions(
            hosts=[sshd.alias],
            ssh_config=str(sshd.ssh_config),
            python=sys.executable,
            workdir=str(wd),
            name=name,
            sets=[f"train.steps={steps}"],
        )
    )
    return execute(plan, say=lambda s: None)


def cli_status(run: str, env: dict[str, str] | None = None) -> float:
    """Seconds for one `nsa-launch status --run RUN --json` process (exit 0 asserted)."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [str(Path(sys.executable).parent / "nsa-launch"), "status", "--run", run, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    took = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr
    return took


def bench(sshd: SSHServer, tmp: Path, repeats: int) -> None:
    wd = tmp / "host"
    # the floor every remote command pays on this machine: one SSH exec of `true` on a warm connection
    tt = transport_for(parse_target(sshd.alias, str(sshd.ssh_config)))
    floor = []
    for _ in range(10):
        t0 = time.perf_counter()
        tt.run("true")
        floor.append(time.perf_counter() - t0)
    row("ssh_exec_true_floor", floor, 0.5, note="context: the cost of any remote command here")
    # the same through the system ssh and a master connection (what a cold `status` process pays)
    mux = openssh.reader(parse_target(sshd.alias, str(sshd.ssh_config)), fallback=lambda: tt)
    assert mux is not None, "ssh multiplexing is unavailable here"
    mux.run("true")
    floor = []
    for _ in range(10):
        t0 = time.perf_counter()
        mux.run("true")
        floor.append(time.perf_counter() - t0)
    row("ssh_mux_exec_true_floor", floor, 0.5, note="context: `ssh` process + exec through a live master")
    fresh = []
    for _ in range(5):
        openssh.stop_masters()
        t0 = time.perf_counter()
        mux.run("true")
        fresh.append(time.perf_counter() - t0)
    row(
        "ssh_new_master_exec_true",
        fresh,
        0.5,
        note="context: the same with no master: handshake + master set-up",
    )
    # warm-up: the first up syncs the whole project; later ups find code and env unchanged
    rec, first_s = up(sshd, wd, "bench-warm")
    wait_first_heartbeat(rec)
    control.kill_run(rec)
    print(
        json.dumps(
            {
                "bench": "up_first_time_to_torchrun_started",
                "seconds": round(first_s, 3),
                "note": "includes the full initial rsync of the project",
            }
        ),
        flush=True,
    )

    starts, statuses, kills = [], [], []
    cold_first: list[float] = []
    cold: list[float] = []
    cold_paramiko: list[float] = []
    for i in range(repeats):
        rec, s = up(sshd, wd, f"bench-{i}")
        starts.append(s)
        wait_first_heartbeat(rec)
        for _ in range(5):
            t0 = time.perf_counter()
            st = control.fetch_status([rec])[0]
            statuses.append(time.perf_counter() - t0)
            assert st["state"] == "running", st
        # A new `nsa-launch status` process each time: first with no SSH master alive (it connects and
        # leaves a master behind), then three that reuse that master, then three with NSA_LAUNCH_SSH_MUX=0
        # (paramiko: import + handshake in every process).
        openssh.stop_masters()
        cold_first.append(cli_status(rec.run))
        cold.extend(cli_status(rec.run) for _ in range(3))
        cold_paramiko.extend(cli_status(rec.run, {openssh.ENV: "0"}) for _ in range(3))
        t0 = time.perf_counter()
        res = control.kill_run(rec)
        kills.append(time.perf_counter() - t0)
        assert res["killed"] and "stopped" in res["message"], res
    row("up_unchanged_code_ready_env_to_torchrun_started", starts, 3.0)
    row("status_api_warm_connection", statuses, 0.5, note="in-process fetch_status (the dashboard's call)")
    row(
        "status_cli_cold_process_first_connection",
        cold_first,
        0.5,
        note="new process, no SSH master alive: python start, imports, ssh handshake (leaves a master)",
    )
    row(
        "status_cli_cold_process_reusing_master",
        cold,
        0.5,
        note="new process, the master of an earlier call alive: python start, imports, one ssh exec",
    )
    row(
        "status_cli_cold_process_paramiko",
        cold_paramiko,
        0.5,
        note="NSA_LAUNCH_SSH_MUX=0: python start, imports incl. paramiko, SSH handshake",
    )
    row("kill_real_tiny_run_verified", kills, 5.0)

    # kill a run that ignores SIGTERM: the agent must escalate to SIGKILL after the grace period
    ign = []
    node = rec.nodes[0]
    t = transport_for(node.host)
    # Ignores SIGTERM and SIGHUP (the pty hangup when the wrapper dies), like a wedged trainer would.
    code = (
        "import signal,time; [signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGHUP)]; "
        "print('ready', flush=True); time.sleep(600)"
    )
    for i in range(repeats):
        run = f"bench-ign-{i}"
        rd = f"{node.workdir}/runs/{run}"
        reply = agent_call(
            t,
            node.workdir,
            node.python,
            "start",
            {
                "run": run,
                "run_dir": rd,
                "workdir": node.workdir,
                "argv": [node.python, "-c", code],
                "env": {},
                "tmux_socket": os.environ["NSA_LAUNCH_TMUX_SOCKET"],
                "manifest": {"run": run},
            },
        )
        assert reply["ok"], reply
        deadline = time.monotonic() + 30
        while (
            "ready" not in (Path(rd) / "train.log").read_text() if (Path(rd) / "train.log").exists() else True
        ):
            assert time.monotonic() < deadline, "the SIGTERM-ignoring stand-in did not start"
            time.sleep(0.05)
        r = registry.RunRecord(
            run=run,
            profile="cpu",
            created=time.time(),
            nodes=[registry.NodeRecord(node.host, node.workdir, node.python, rd)],
            tmux_socket=os.environ["NSA_LAUNCH_TMUX_SOCKET"],
        )
        t0 = time.perf_counter()
        res = control.kill_run(r)
        ign.append(time.perf_counter() - t0)
        assert res["killed"] and "stopped" in res["message"], res
    row("kill_run_ignoring_sigterm_verified", ign, 5.0, grace_s=registry.RunRecord.kill_grace_s)

    # one-file change: sync from a private copy of the checkout (the shared one changes under us)
    src = tmp / "src"
    for rel in project_files(ROOT):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    tt = transport_for(parse_target(sshd.alias, str(sshd.ssh_config)))
    sync(src, tt, str(tmp / "sync-wd"))
    times = []
    for i in range(repeats):
        (src / "launcher" / "host" / "state.py").write_text(
            (src / "launcher" / "host" / "state.py").read_text() + f"\n# edit {i}\n"
        )
        t0 = time.perf_counter()
        res = sync(src, tt, str(tmp / "sync-wd"))
        times.append(time.perf_counter() - t0)
        assert res.files_sent == 1, res
    row("sync_one_file_change", times, 1.0, files=len(project_files(src)))

    # logs -f: a line appended to train.log on the host reaches the local reader
    rec, _ = up(sshd, wd, "bench-logs")
    wait_first_heartbeat(rec)
    lat = []
    stream = control.stream_log(rec, follow=True, last_n=1)
    next(stream)
    for i in range(repeats):
        marker = f"bench-marker-{i}-{time.time()}"
        t0 = time.perf_counter()
        with open(Path(rec.run_dir) / "train.log", "a") as f:
            f.write(marker + "\n")
        for line in stream:
            if marker in line:
                break
        lat.append(time.perf_counter() - t0)
    stream.close()
    control.kill_run(rec)
    row("logs_follow_line_latency", lat, 1.0)


if __name__ == "__main__":
    main()
