"""`mirror.pull` under faults: the mirror never goes backward (a host checkpoint that rots is reported,
never taken in place of the mirror's newer copy), nothing is hashed twice when nothing changed, a
failed pull leaves the mirror as it was with no temporary dirs, and one writer at a time (the run's
write lock: `pull` waits for a holder and names it). Real parts: a run dir reached through the real
sshd on 127.0.0.1 (the rot test) or locally, real rsync, the host-side check in a real python, a
real second process holding the lock."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.recover.mirror import PullFailed, mirror_dir, pull
from launcher.run import registry
from launcher.run.locks import RunLocked, run_lock
from launcher.ssh.hosts import local_host, parse_target
from nsa.runfiles import RunDir, verify_checkpoint
from tests.fixtures.checkpoints import rot as _rot
from tests.fixtures.checkpoints import write_checkpoint as _ckpt

RUN = "m1"


def _record(rd: Path, host=None) -> registry.RunRecord:
    node = registry.NodeRecord(host or local_host(), str(PROJECT_ROOT), sys.executable, str(rd))
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node])
    registry.save(rec)
    return rec


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _latest(run: str = RUN) -> str | None:
    ck = RunDir(mirror_dir(run)).latest_checkpoint()
    return ck.name if ck else None


def test_host_checkpoint_rot_never_rolls_the_mirror_back(home, tmp_path, sshd):
    """The host's newest checkpoint rots after it was mirrored: the pull keeps the newer copy (no
    "(new)", nothing pruned, the host's older intact step-4 not taken). A newer step that is corrupt
    before it was mirrored is reported and not taken; a later good one still comes in."""
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    ck8 = _ckpt(rd, 8, b"w8" * 1000)
    rec = _record(rd, parse_target(sshd.alias, str(sshd.ssh_config)))
    said: list[str] = []
    assert pull(rec, said.append)["pulled"] == "step-00000008"
    _rot(ck8)
    res = pull(rec, said.append)
    assert res["pulled"] is None and res["checkpoint"] == "step-00000008"
    assert "(unchanged)" in said[-1] and "(new)" not in said[-1]
    assert [p.name for p in RunDir(mirror_dir(RUN)).checkpoints()] == ["step-00000008"]
    assert _latest() == "step-00000008"
    assert verify_checkpoint(mirror_dir(RUN) / "checkpoints" / "step-00000008") is None
    # a newer step that rots before it is mirrored: named, not taken
    _rot(_ckpt(rd, 10, b"w10" * 1000))
    res = pull(rec, said.append)
    assert res["pulled"] is None and res["corrupt"] == ["step-00000010"] and _latest() == "step-00000008"
    assert said[-2].startswith(f"host's step-00000010 of {RUN} is corrupt (") and "sha256 differs" in said[-2]
    assert said[-2].endswith("; the mirror keeps step-00000008") and "(unchanged)" in said[-1]
    # a newer intact step comes in (new); a still newer corrupt one is named beside it
    _ckpt(rd, 12, b"w12" * 1000)
    _rot(_ckpt(rd, 14, b"w14" * 1000))
    res = pull(rec, said.append)
    assert res["pulled"] == "step-00000012" and res["corrupt"] == ["step-00000014"]
    assert said[-2].startswith(f"host's step-00000014 of {RUN} is corrupt (")
    assert said[-2].endswith("; the mirror keeps step-00000012") and "(new)" in said[-1]
    assert [p.name for p in RunDir(mirror_dir(RUN)).checkpoints()] == ["step-00000012"]  # 8 pruned after


def test_a_pull_with_nothing_new_hashes_nothing(home, tmp_path, monkeypatch):
    """The host verifies only checkpoints newer than the mirror's, and the mirror's own copy, unchanged
    since it verified, is not hashed again."""
    import nsa.runfiles as rf

    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd)
    first = pull(rec, lambda _: None)
    assert first["pulled"] == "step-00000004" and first["host_checked"] == ["step-00000004"]
    calls: list[str] = []
    real = rf.file_sha256
    monkeypatch.setattr(rf, "file_sha256", lambda p, *a, **k: calls.append(str(p)) or real(p, *a, **k))
    res = pull(rec, lambda _: None)
    assert res["pulled"] is None and res["host_checked"] == [] and calls == []
    # a mirrored file rewritten behind the mirror's back is hashed (and found) again
    _rot(mirror_dir(RUN) / "checkpoints" / "step-00000004")
    os.utime(mirror_dir(RUN) / "checkpoints" / "step-00000004" / "model.pt", ns=(1, 1))
    res = pull(rec, lambda _: None)
    assert calls and res["pulled"] == "step-00000004"  # the damaged copy replaced by the host's


def _file_size_limit(limit: int):
    """RLIMIT_FSIZE for this process and the rsync it starts, with SIGXFSZ ignored: a write past the
    limit fails with EFBIG, as a write on a full disk fails with ENOSPC."""
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    return old, old_handler


def test_a_failed_pull_keeps_the_mirror_and_leaves_no_temporary_dir(home, tmp_path):
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd)
    assert pull(rec, lambda _: None)["pulled"] == "step-00000004"
    _ckpt(rd, 8, os.urandom(512 * 1024))  # too big to land under the limit below
    old, handler = _file_size_limit(256 * 1024)
    try:
        with pytest.raises(PullFailed) as e:
            pull(rec, lambda _: None)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)
    assert e.value.mirror_checkpoint == "step-00000004" and e.value.host_newest == "step-00000008"
    assert "pulling step-00000008 from" in e.value.message
    ckdir = mirror_dir(RUN) / "checkpoints"
    assert sorted(p.name for p in ckdir.iterdir() if p.name.startswith(".tmp-")) == []
    assert _latest() == "step-00000004" and verify_checkpoint(ckdir / "step-00000004") is None


def _hold_run_lock() -> subprocess.Popen:
    code = (
        "import time; from launcher.run.locks import run_lock\n"
        f"with run_lock({RUN!r}, 'nsa-launch watch: replacing pod p-1'):\n"
        "    print('held', flush=True); time.sleep(120)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_pull_waits_for_the_run_lock_and_names_its_holder(home, tmp_path):
    from click.testing import CliRunner

    from launcher.cli import cli

    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    _record(rd)
    holder = _hold_run_lock()
    try:
        res = CliRunner().invoke(cli, ["pull", "--run", RUN, "--wait", "0.3"])
        assert res.exit_code == 1, res.output
        assert (
            f"run {RUN} is being changed by pid {holder.pid} (nsa-launch watch: replacing pod p-1)"
            in res.output
        )
        assert not mirror_dir(RUN).exists()  # it touched nothing
        with pytest.raises(RunLocked), run_lock(RUN, "test", timeout=0.2):
            pass
    finally:
        holder.kill()
        holder.wait()
    res = CliRunner().invoke(cli, ["pull", "--run", RUN, "--wait", "5"])
    assert res.exit_code == 0, res.output
    assert _latest() == "step-00000004"


def test_concurrent_pulls_leave_latest_always_naming_a_verified_dir(home, tmp_path):
    """A `pull` process and this one (a watcher's pulls) race while the host saves new checkpoints:
    at every look, the mirror's `latest` names a directory that verifies."""
    rd = tmp_path / "run"
    _ckpt(rd, 1, b"w1" * 4000)
    rec = _record(rd)
    code = (
        "import sys; from launcher.run import registry; from launcher.recover.mirror import pull\n"
        f"for _ in range(4): pull(registry.load({RUN!r}), lambda _: None)"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code], env=dict(os.environ), stderr=subprocess.PIPE, text=True
    )
    bad: list[str] = []
    stop = threading.Event()

    def look() -> None:
        ckdir = mirror_dir(RUN) / "checkpoints"
        while not stop.is_set():
            try:
                name = (ckdir / "latest").read_text().strip()
            except FileNotFoundError:
                continue
            why = verify_checkpoint(ckdir / name)
            # a `latest` read just before a newer commit pruned its dir is the reader's race, not a bug
            if why is not None and (ckdir / "latest").read_text().strip() == name:
                bad.append(f"{name}: {why}")

    checker = threading.Thread(target=look, daemon=True)
    checker.start()
    try:
        for step in range(2, 6):
            _ckpt(rd, step, bytes([step]) * 8000)
            pull(rec, lambda _: None)
        assert other.wait(timeout=120) == 0, other.stderr.read()[-2000:]
    finally:
        stop.set()
        checker.join()
        if other.poll() is None:
            other.kill()
    assert bad == [] and _latest() == "step-00000005"
