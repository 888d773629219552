"""The shared OpenSSH connection's argv, socket placement and switches (no sshd needed here; the
e2e half is tests/e2e/test_launch_ssh_mux.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.ssh import openssh
from launcher.ssh.hosts import local_host, parse_target
from launcher.ssh.remote import reader_for
from launcher.ssh.transport import openssh_argv


def _unused() -> None:
    raise AssertionError("the fallback must not be called")


def test_argv_keeps_the_strict_host_key_policy_and_the_spec(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    key = tmp_path / "id"
    key.write_text("x")
    cfg = tmp_path / "cfg"
    cfg.write_text("")
    spec = parse_target(f"ubuntu@10.0.0.5 -p 2222 -i {key}", str(cfg))
    t = openssh.reader(spec, _unused)
    assert t is not None
    argv = t.argv("echo hi")
    joined = " ".join(argv)
    for opt in (
        "BatchMode=yes",
        "StrictHostKeyChecking=yes",
        "GlobalKnownHostsFile=/dev/null",
        "ControlMaster=auto",
    ):
        assert f"-o {opt}" in joined
    assert "accept-new" not in joined and "StrictHostKeyChecking=no" not in joined
    assert argv[:3] == ["ssh", "-F", str(cfg)]
    assert argv[argv.index("-p") : argv.index("-p") + 2] == ["-p", "2222"]
    assert argv[argv.index("-l") : argv.index("-l") + 2] == ["-l", "ubuntu"]
    assert ["-i", str(key)] == argv[argv.index("-i") : argv.index("-i") + 2]
    assert f"ControlPath={t.control_path}" in argv and argv[-3:] == ["--", "10.0.0.5", "echo hi"]
    # the rsync argv is the same builder: the same policy, plus what paramiko resolved
    rs = openssh_argv(spec, user="u", port=22, known_hosts=["/k h"], identities=[])
    assert "StrictHostKeyChecking=yes" in rs and "UserKnownHostsFile='/k h'" in rs and "-i" not in rs
    assert openssh.reader(parse_target("u@[::1] -p 22"), _unused).argv("true")[-2] == "::1"


def test_sockets_live_in_a_private_dir_short_enough_for_a_unix_socket(tmp_path, monkeypatch):
    home = Path("/tmp") / f"nsa-h-{os.getpid()}"
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(home))
    try:
        a = openssh.control_path(parse_target("gpu-pod"))
        assert a is not None and Path(a).parent == home / "ssh"
        assert (home / "ssh").stat().st_mode & 0o777 == 0o700
        cfg = tmp_path / "cfg"
        cfg.write_text("Host gpu-pod\n")
        assert openssh.control_path(parse_target("gpu-pod", str(cfg))) not in (
            a,
            None,
        )  # own config, own master
        assert openssh.control_path(parse_target("gpu-pod")) == a  # stable
    finally:
        for p in (home / "ssh", home):
            p.rmdir()
    deep = tmp_path / ("d" * 80)
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(deep))
    b = openssh.control_path(parse_target("gpu-pod"))
    assert b is not None and len(b.encode()) <= 86 and Path(b).parent == openssh.control_dirs(deep)[1]
    assert Path(b).parent.stat().st_mode & 0o777 == 0o700
    assert Path(b).parent.parent.stat().st_mode & 0o777 == 0o700
    Path(b).parent.rmdir()


def test_a_dir_others_could_swap_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert not openssh._private_dir(shared / "ssh")
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "mine"
    (link).mkdir(mode=0o700)
    (link / "ssh").symlink_to(real)
    assert not openssh._private_dir(link / "ssh")
    loose = tmp_path / "ok"
    loose.mkdir(mode=0o755)
    (loose / "ssh").mkdir(mode=0o755)
    assert openssh._private_dir(loose / "ssh") and (loose / "ssh").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("flag", ["0", "no", "off", "false"])
def test_nsa_launch_ssh_mux_0_turns_it_off(flag, monkeypatch, tmp_path):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    monkeypatch.setenv(openssh.ENV, flag)
    assert not openssh.enabled() and openssh.reader(parse_target("gpu-pod"), _unused) is None


def test_no_ssh_binary_or_a_local_host_means_no_reader(monkeypatch, tmp_path):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    monkeypatch.delenv(openssh.ENV, raising=False)
    assert openssh.reader(local_host(), _unused) is None
    assert reader_for(local_host()).spec.is_local
    monkeypatch.setenv("PATH", str(tmp_path))  # no ssh on PATH
    assert not openssh.enabled() and openssh.reader(parse_target("gpu-pod"), _unused) is None


def test_ssh_failures_are_told_apart():
    assert openssh._unreachable("ssh: connect to host 1.2.3.4 port 22: Connection refused\r\n")
    assert openssh._unreachable("ssh: Could not resolve hostname nope: Name or service not known")
    assert openssh._unreachable("Connection timed out during banner exchange")
    for other in (
        "Host key verification failed.",
        "root@1.2.3.4: Permission denied (publickey).",
        "mux_client_request_session: read from master failed: Broken pipe",
    ):
        assert not openssh._unreachable(other)
