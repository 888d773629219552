"""Transport and sync against the real loopback sshd (no torchrun): rsync delta and .gitignore,
the sftp fallback, first contact only with --accept-new-host-key, and `doctor`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.ssh.hosts import parse_target
from launcher.ssh.sync import sync
from launcher.ssh.transport import open_transport
from tests.e2e.launch_support import PYTHON, invoke, isolate

pytestmark = pytest.mark.e2e


def _fake_project(root: Path) -> Path:
    """A small project tree with ignored files and artifacts (a fixed source: the shared checkout moves)."""
    for rel, text in {
        "pkg/a.py": "A = 1\n",
        "pkg/sub/b.py": "B = 2\n",
        ".gitignore": "ignored.txt\n*.log\n",
        "ignored.txt": "x",
        "pkg/sub/debug.log": "x",
        "runs/r1/train.log": "x",
        ".venv/bin/python": "x",
        "pkg/checkpoints/step-1/model.pt": "x",
        "pkg/__pycache__/a.cpython-311.pyc": "x",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_rsync_delta_respects_gitignore_and_keeps_runs(sshd, tmp_path):
    src = _fake_project(tmp_path / "src")
    t = open_transport(parse_target(sshd.alias, str(sshd.ssh_config)))
    wd = tmp_path / "host wd $(x)"
    try:
        seen: list[int] = []
        first = sync(src, t, str(wd), on_progress=seen.append)
        assert first.method == "rsync" and first.files_sent == 3 and seen and seen[-1] == 100
        assert _tree(wd) == {".gitignore", "pkg/a.py", "pkg/sub/b.py"}
        (wd / "runs" / "old").mkdir(parents=True)
        (wd / "stale.txt").write_text("not in the project")
        (src / "pkg" / "a.py").write_text("A = 3\n")  # same size, same second: only the ns mtime differs
        second = sync(src, t, str(wd))
        assert second.files_sent == 1 and (wd / "pkg" / "a.py").read_text() == "A = 3\n"
        assert (wd / "runs" / "old").is_dir() and not (wd / "stale.txt").exists()
        assert sync(src, t, str(wd)).files_sent == 0
    finally:
        t.close()


def test_project_checkout_syncs_without_artifacts(sshd, tmp_path):
    t = open_transport(parse_target(sshd.alias, str(sshd.ssh_config)))
    wd = tmp_path / "wd"
    try:
        sync(PROJECT_ROOT, t, str(wd))
        assert (wd / "launcher" / "host" / "__main__.py").is_file() and (
            wd / "configs" / "tiny.yaml"
        ).is_file()
        assert not (wd / ".venv").exists() and not (wd / ".git").exists() and not (wd / "runs").exists()
    finally:
        t.close()


def test_sftp_fallback_when_the_host_has_no_rsync(sshd, tmp_path):
    src = _fake_project(tmp_path / "src")
    subprocess.run(["git", "init", "-q", str(src)], check=True)  # .gitignore is read through git here
    t = open_transport(parse_target(sshd.alias, str(sshd.ssh_config)))
    wd = tmp_path / "wd"
    try:
        res = sync(src, t, str(wd), host_has_rsync=False)
        assert res.method == "sftp" and res.files_sent == 3
        assert _tree(wd) == {".gitignore", "pkg/a.py", "pkg/sub/b.py"}
        assert sync(src, t, str(wd), host_has_rsync=False).files_sent == 0  # unchanged: nothing sent
        (src / "pkg" / "sub" / "b.py").write_text("B = 22\n")
        assert sync(src, t, str(wd), host_has_rsync=False).files_sent == 1
        assert (wd / "pkg" / "sub" / "b.py").read_text() == "B = 22\n"
    finally:
        t.close()


def test_first_contact_needs_accept_new_host_key(sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host fresh\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.key_path}\n  UserKnownHostsFile {kh}\n"
    )
    spec = parse_target("fresh", str(cfg))
    from launcher.core.errors import LaunchError

    # the fingerprint as OpenSSH's own tool prints it for the fixture's host key
    fp = subprocess.run(
        ["ssh-keygen", "-lf", f"{sshd.host_key}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert fp.startswith("SHA256:")
    with pytest.raises(LaunchError, match="accept-new-host-key") as refused:
        open_transport(spec)
    assert fp in refused.value.message  # first contact shows what the host presented
    assert not kh.exists() or kh.read_text() == ""
    t = open_transport(spec, accept_new_host_key=True)
    assert t.run("echo ok").stdout == "ok\n"
    assert t.recorded_host_key is not None and fp in t.recorded_host_key and str(kh) in t.recorded_host_key
    t.close()
    assert f"[{sshd.host}]:{sshd.port}" in kh.read_text()
    t = open_transport(spec)  # now known: strict checking passes without the flag
    assert t.run("echo again").stdout == "again\n"
    t.close()


def test_doctor_checks_a_host_read_only(sshd, tmp_path, monkeypatch, tmux_server):
    isolate(monkeypatch, tmp_path, tmux_server)
    res = invoke(
        "doctor",
        "--host",
        sshd.alias,
        "--ssh-config",
        str(sshd.ssh_config),
        "--python",
        PYTHON,
        "--workdir",
        str(PROJECT_ROOT),
    )
    assert res.exit_code == 0, res.output
    assert "agent answers" in res.output and "all checks passed" in res.output
    bad = invoke(
        "doctor",
        "--host",
        sshd.alias,
        "--ssh-config",
        str(sshd.ssh_config),
        "--profile",
        "1xa100",
        "--python",
        PYTHON,
    )
    assert bad.exit_code == 1 and "expects 1 GPUs" in bad.output
    assert not tmux_server.sessions


def test_profiles_and_runs_listings(tmp_path, monkeypatch, tmux_server):
    isolate(monkeypatch, tmp_path, tmux_server)
    out = invoke("profiles").output
    for name in ("cpu", "1xa100", "2xa100", "8xh100", "2x8xh100"):
        assert name in out
    env = invoke("profiles", "--env").output
    assert "NCCL_P2P_DISABLE" in env and "NSA_DDP_BUCKET_MB" in env and "HF_TOKEN" in env
    res = invoke("runs")
    assert res.exit_code == 0 and "no runs yet" in res.output
    res = invoke("status")  # nothing launched yet is not an error
    assert res.exit_code == 0 and "no runs yet" in res.output and "nsa-launch up" in res.output
    res = invoke("status", "--json")
    assert res.exit_code == 0 and res.stdout.strip() == "[]"


def test_unreachable_host_is_lost_not_an_exception_and_recovers(sshd, tmp_path, monkeypatch, tmux_server):
    """fetch_status for a host that stops answering: state "lost" with an error, then back."""
    import json
    import time

    from launcher.run.api import RunRecord, fetch_status, list_runs
    from launcher.run.registry import NodeRecord, save

    isolate(monkeypatch, tmp_path, tmux_server)
    rd = tmp_path / "runs" / "done"
    rd.mkdir(parents=True)
    (rd / "manifest.json").write_text(
        json.dumps({"run": "done", "total_steps": 5, "started_at": time.time()})
    )
    (rd / "exit_code").write_text("0\n")
    node = NodeRecord(parse_target(sshd.alias, str(sshd.ssh_config)), str(PROJECT_ROOT), PYTHON, str(rd))
    save(
        RunRecord(
            run="done", profile="cpu", created=time.time(), nodes=[node], tmux_socket=tmux_server.socket_name
        )
    )
    [rec] = list_runs()
    assert fetch_status([rec])[0]["state"] == "finished"
    sshd.stop()
    try:
        [st] = fetch_status([rec])
        assert st["state"] == "lost" and "cannot reach" in st["error"] and st["run"] == "done"
        # explained: when the host last answered, and where the run was then
        assert st["last_state"] == "finished" and time.time() - st["last_contact"] < 120
        res = invoke("status", "--run", "done")
        assert res.exit_code == 1 and "last contact" in res.output and "(finished)" in res.output
    finally:
        sshd.start()
    [st] = fetch_status([rec])
    assert st["state"] == "finished" and st["error"] is None and st["exit_code"] == 0


def test_host_venv_is_built_once_per_spec_hash(sshd, tmp_path):
    """host.python: venv. A venv whose marker matches the dependency-spec hash is used without pip;
    without the marker the venv is (re)built, and a failing build names its fix. (The tests never
    install torch: the base python is a path that does not exist, so a build attempt must fail.)"""
    from launcher.config.profiles import HostEnv
    from launcher.core.errors import RuntimeFailure
    from launcher.launch.hostenv import MARKER_PREFIX, ensure_python, plan_env, spec_hash

    env = HostEnv(python="venv", base_python="/nonexistent/python3")
    t = open_transport(parse_target(sshd.alias, str(sshd.ssh_config)))
    wd = tmp_path / "wd"
    (wd / ".venv" / "bin").mkdir(parents=True)
    try:
        with pytest.raises(RuntimeFailure, match="building the venv") as e:
            ensure_python(t, str(wd), env, None)
        assert "host.base_python" in e.value.fix
        assert not (wd / ".venv").exists()  # a failed build leaves no half-built venv behind
        (wd / ".venv").mkdir()
        (wd / ".venv" / f"{MARKER_PREFIX}{spec_hash(env, plan_env('cpu', None))}").touch()
        assert ensure_python(t, str(wd), env, None) == f"{wd}/.venv/bin/python"  # ready: nothing rebuilt
        assert ensure_python(t, str(wd), env, PYTHON) == PYTHON  # a named python wins
    finally:
        t.close()


def test_rsync_refused_key_points_at_keys_not_the_workdir(tmp_path, monkeypatch):
    """A key the host stops accepting (revoked while the paramiko session stays authenticated): rsync's
    own SSH connection gets "Permission denied (publickey)", and the fix names the key, not the disk."""
    from launcher.core.errors import RuntimeFailure
    from tests.fixtures.sshd import SSHServer, free_port

    monkeypatch.setenv("NSA_LAUNCH_SSH_MUX", "0")  # rsync must authenticate itself, not ride a master
    own = SSHServer(tmpdir=tmp_path / "sshd", port=free_port())  # its own: this test edits authorized_keys
    own.setup()
    own.start()
    t = open_transport(parse_target(own.alias, str(own.ssh_config)))
    try:
        (own.tmpdir / "authorized_keys").write_text("")
        with pytest.raises(RuntimeFailure, match="publickey") as e:
            sync(_fake_project(tmp_path / "src"), t, str(tmp_path / "wd"))
        assert "authorized_keys" in e.value.fix and str(own.key_path) in e.value.fix
        assert "writable" not in e.value.fix
    finally:
        t.close()
        own.stop()


def test_doctor_first_contact_hint_names_its_own_option_and_each_problem_shows_once(
    sshd, tmp_path, monkeypatch, tmux_server
):
    isolate(monkeypatch, tmp_path, tmux_server)
    kh = tmp_path / "known_hosts"
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host fresh\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.key_path}\n  UserKnownHostsFile {kh}\n"
    )
    args = ["doctor", "--host", "fresh", "--ssh-config", str(cfg), "--python", PYTHON]
    args += ["--workdir", str(PROJECT_ROOT)]
    refused = invoke(*args)
    assert refused.exit_code == 1, refused.output
    assert refused.output.count("--accept-new-host-key") == 1, refused.output  # printed once
    assert "doctor found 1 problem(s)" in refused.output
    accepted = invoke(*args, "--accept-new-host-key")  # the option the hint names exists here
    assert accepted.exit_code == 0 and "all checks passed" in accepted.output, accepted.output
    assert f"[{sshd.host}]:{sshd.port}" in kh.read_text()
