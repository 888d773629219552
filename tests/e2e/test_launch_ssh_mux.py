"""`status` and `logs` over the shared OpenSSH connection (launcher/ssh/openssh.py) on the real sshd.

A run record on the loopback sshd whose run has finished (run dir with manifest and exit_code, no
torchrun): the multiplexed path answers exactly what the paramiko path answers, a second process
reuses the first one's master, a wrong or unknown host key is still refused with its fix (even
while a master to the same address is alive), and a stopped sshd is a quick exit 1, then recovery.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.run.registry import NodeRecord, RunRecord, save
from launcher.ssh import openssh
from launcher.ssh.hosts import parse_target
from tests.e2e.launch_support import PYTHON, invoke, isolate

pytestmark = pytest.mark.e2e


def _finished_run(tmp_path: Path, run: str, target: str, ssh_config: Path, tmux_socket: str) -> NodeRecord:
    rd = tmp_path / "runs" / run
    rd.mkdir(parents=True)
    (rd / "manifest.json").write_text(
        json.dumps({"run": run, "total_steps": 5, "started_at": time.time() - 9})
    )
    (rd / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 4.25, "tokens_per_s": 1234.5}) + "\n")
    (rd / "train.log").write_text("".join(f"line {i}\n" for i in range(50)))
    (rd / "exit_code").write_text("0\n")
    node = NodeRecord(parse_target(target, str(ssh_config)), str(PROJECT_ROOT), PYTHON, str(rd))
    save(RunRecord(run=run, profile="cpu", created=time.time(), nodes=[node], tmux_socket=tmux_socket))
    return node


def _status(run: str, mux: bool = True) -> tuple[int, list[dict], str]:
    os.environ[openssh.ENV] = "1" if mux else "0"
    try:
        res = invoke("status", "--run", run, "--json")
    finally:
        del os.environ[openssh.ENV]
    return res.exit_code, json.loads(res.stdout) if res.stdout.strip() else [], res.output


def _master_pid(path: str) -> int | None:
    p = subprocess.run(
        ["ssh", "-o", f"ControlPath={path}", "-O", "check", "x"], capture_output=True, text=True
    )
    m = re.search(r"pid=(\d+)", p.stderr + p.stdout)
    return int(m.group(1)) if p.returncode == 0 and m else None


def test_status_over_the_shared_connection_matches_paramiko(sshd, tmp_path, monkeypatch, tmux_server):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    node = _finished_run(tmp_path, "done", sshd.alias, sshd.ssh_config, tmux_server.socket_name)
    code, [mux], _ = _status("done", mux=True)
    path = openssh.control_path(node.host)
    assert code == 0 and path and Path(path).is_socket() and _master_pid(path)
    code, [para], _ = _status("done", mux=False)
    assert code == 0
    assert mux["state"] == "finished" and mux["loss"] == 4.25 and mux["step"] == 5 and mux["error"] is None
    assert {k: v for k, v in mux.items() if k != "time"} == {k: v for k, v in para.items() if k != "time"}
    # pytest's tmp dirs are too long for a unix socket: this home's sockets live in the /tmp fallback
    assert not Path(path).is_relative_to(home) and Path(path).parent in openssh.control_dirs(home)
    assert Path(path).parent.stat().st_mode & 0o777 == 0o700
    # a separate `nsa-launch status` process takes the multiplexed path without importing paramiko
    probe = (
        "import sys\nfrom launcher.cli import cli\n"
        "try:\n    cli.main(['status', '--run', 'done', '--json'])\nexcept SystemExit as e:\n    code = e.code\n"
        "print('EXIT', code, 'paramiko' in sys.modules, 'fabric' in sys.modules, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "EXIT 0 False False" in out.stderr, out.stderr
    assert json.loads(out.stdout)[0]["state"] == "finished"


def test_a_second_status_process_reuses_the_master(sshd, tmp_path, monkeypatch, tmux_server):
    isolate(monkeypatch, tmp_path, tmux_server)
    # a short home: the sockets live under it, in a 0700 ssh/ directory
    home = Path(tempfile.mkdtemp(prefix="nsa-h-", dir="/tmp"))
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(home))
    try:
        node = _finished_run(tmp_path, "again", sshd.alias, sshd.ssh_config, tmux_server.socket_name)
        assert _status("again")[0] == 0
        path = openssh.control_path(node.host)
        assert path and Path(path).parent == home / "ssh" and Path(path).is_socket()
        assert (home / "ssh").stat().st_mode & 0o777 == 0o700
        pid = _master_pid(path)
        assert pid is not None
        exe = Path(sys.executable).parent / "nsa-launch"
        out = subprocess.run([str(exe), "status", "--run", "again", "--json"], capture_output=True, text=True)
        assert out.returncode == 0 and json.loads(out.stdout)[0]["state"] == "finished", out.stderr
        assert _master_pid(path) == pid  # the same master answered: no second connection
        # logs through the same master, and the same lines as over paramiko
        mux_lines = invoke("logs", "--run", "again", "-n", "3").output.splitlines()
        monkeypatch.setenv(openssh.ENV, "0")
        assert mux_lines == ["line 47", "line 48", "line 49"]
        assert invoke("logs", "--run", "again", "-n", "3").output.splitlines() == mux_lines
        assert _master_pid(path) == pid
        assert openssh.stop_masters(home) == 1 and _master_pid(path) is None and not Path(path).exists()
    finally:
        openssh.stop_masters(home)
        import shutil

        shutil.rmtree(home, ignore_errors=True)


def _bad_hosts_config(sshd, tmp_path: Path) -> Path:
    """Aliases for the same sshd: one whose known_hosts holds a WRONG key, one with an empty one."""
    wrong_kh = tmp_path / "wrong_known_hosts"
    fake_key = Path(str(sshd.key_path) + ".pub").read_text().split()[:2]  # a real key, not the host's
    wrong_kh.write_text(f"[{sshd.host}]:{sshd.port} {fake_key[0]} {fake_key[1]}\n")
    empty_kh = tmp_path / "empty_known_hosts"
    empty_kh.write_text("")
    cfg = tmp_path / "ssh_config_bad"
    common = (
        f"  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n  IdentityFile {sshd.key_path}\n"
    )
    cfg.write_text(
        f"Host wrongkey\n{common}  UserKnownHostsFile {wrong_kh}\n\n"
        # accept-new in the user's config must not make the shared connection trust a new key
        f"Host newkey\n{common}  UserKnownHostsFile {empty_kh}\n  StrictHostKeyChecking accept-new\n\n"
    )
    return cfg


def test_wrong_or_unknown_host_key_is_refused_even_with_a_master_alive(
    sshd, tmp_path, monkeypatch, tmux_server
):
    isolate(monkeypatch, tmp_path, tmux_server)
    good = _finished_run(tmp_path, "good", sshd.alias, sshd.ssh_config, tmux_server.socket_name)
    assert _status("good")[0] == 0
    assert _master_pid(openssh.control_path(good.host))  # a verified master to the same address
    cfg = _bad_hosts_config(sshd, tmp_path)
    wrong = _finished_run(tmp_path, "wrong", "wrongkey", cfg, tmux_server.socket_name)
    code, [st], output = _status("wrong")
    assert code == 1 and st["state"] == "lost", output
    assert "MISMATCH" in st["error"] and "ssh-keygen -R" in st["error"], st["error"]
    assert "ssh-keygen -R" in output  # on stderr too
    assert _master_pid(openssh.control_path(wrong.host)) is None
    new = _finished_run(tmp_path, "new", "newkey", cfg, tmux_server.socket_name)
    code, [st], output = _status("new")
    assert code == 1 and "--accept-new-host-key" in st["error"], output
    assert (tmp_path / "empty_known_hosts").read_text() == ""  # nothing was accepted
    assert _master_pid(openssh.control_path(new.host)) is None


def test_stopped_sshd_is_a_quick_exit_1_then_recovers(sshd, tmp_path, monkeypatch, tmux_server):
    isolate(monkeypatch, tmp_path, tmux_server)
    node = _finished_run(tmp_path, "gone", sshd.alias, sshd.ssh_config, tmux_server.socket_name)
    assert _status("gone")[0] == 0
    path = openssh.control_path(node.host)
    assert _master_pid(path)
    sshd.stop()
    try:
        for _ in range(2):  # the master's connection dropped; then no master at all
            t0 = time.monotonic()
            code, [st], output = _status("gone")
            assert time.monotonic() - t0 < 10, "status waited on a dead host"
            assert code == 1 and st["state"] == "lost", output
            assert "cannot reach" in st["error"] and "check the host is up" in st["error"], st["error"]
            assert "error: run gone is lost" in output
    finally:
        sshd.start()
    code, [st], _ = _status("gone")
    assert code == 0 and st["state"] == "finished" and _master_pid(path)


def test_rsync_of_up_leaves_the_master_that_status_reuses(sshd, tmp_path, monkeypatch, tmux_server):
    from launcher.ssh.sync import sync
    from launcher.ssh.transport import open_transport

    isolate(monkeypatch, tmp_path, tmux_server)
    node = _finished_run(tmp_path, "synced", sshd.alias, sshd.ssh_config, tmux_server.socket_name)
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    t = open_transport(node.host)
    try:
        assert sync(src, t, str(tmp_path / "wd")).files_sent == 1
    finally:
        t.close()
    path = openssh.control_path(node.host)
    pid = _master_pid(path)
    assert pid is not None and (tmp_path / "wd" / "pkg" / "a.py").read_text() == "A = 1\n"
    assert _status("synced")[0] == 0 and _master_pid(path) == pid
