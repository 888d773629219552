"""`nsa-launch pull` and `watch` as a user whose pod dies mid-run meets them (the qa walk of
2026-11-27): a SIGTERM (a `kill`, a closed terminal, a supervisor) of `pull` in the middle of a
checkpoint's rsync stops that rsync (no orphan left writing into the mirror) and says what the
mirror keeps; a pod whose sshd dies mid-copy fails the pull with the mirror as it was; a
non-finite number of seconds is bad input. Real parts: a run dir reached through the real sshd on
127.0.0.1, real rsync, `nsa-launch pull` in its own process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.recover.mirror import PullFailed, mirror_dir, pull
from launcher.run import registry
from launcher.ssh.hosts import parse_target
from nsa.runfiles import RunDir, verify_checkpoint
from tests.fixtures.checkpoints import write_checkpoint as _ckpt

RUN = "qp1"
BIG = 16 * 1024 * 1024  # over ssh on 127.0.0.1 its rsync runs long enough to be caught and stopped


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _record(rd: Path, sshd) -> registry.RunRecord:
    host = parse_target(sshd.alias, str(sshd.ssh_config))
    rec = registry.RunRecord(
        run=RUN, profile="cpu", created=1.0,
        nodes=[registry.NodeRecord(host, str(PROJECT_ROOT), sys.executable, str(rd))],
    )  # fmt: skip
    registry.save(rec)
    return rec


def _procs_with(*texts: str) -> list[int]:
    """Live processes whose command line holds every one of `texts` (an rsync writing into the mirror)."""
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit() and int(e) != os.getpid():
            try:
                cmd = Path(f"/proc/{e}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if all(t in cmd for t in texts):
                out.append(int(e))
    return out


def _descendants() -> list[int]:
    """This process's descendants (the pull's rsync is a child, or a grandchild through nsa-launch)."""
    out, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:  # it ended meanwhile
            continue
        for task in tasks:
            try:
                kids = [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _rsync_of(ckpt: str, home: Path, timeout: float = 60.0) -> int:
    """The rsync copying `ckpt` into the mirror, as soon as it is spawned: only this process's
    descendants are read (a few files, not all of /proc), so it is caught before ssh has even
    connected, however fast the copy would be (a scan of every process under load once missed a
    16 MB copy that finished first, and the pull succeeded)."""

    def copying(pid: int) -> bool:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
        return f".tmp-{ckpt}." in cmd and str(home) in cmd

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in _descendants():
            try:
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            # the rsync the pull started, not a fork of it (its ssh before exec, its receiver): those
            # carry the same command line, and stopping one stops nothing the pull kills
            if copying(pid) and not copying(ppid):
                return pid
        time.sleep(0.001)
    raise AssertionError(f"no rsync of {ckpt} appeared")


def _latest() -> str | None:
    ck = RunDir(mirror_dir(RUN)).latest_checkpoint()
    return ck.name if ck else None


def _mirror_as_it_was(keeps: str) -> None:
    ckdir = mirror_dir(RUN) / "checkpoints"
    assert sorted(p.name for p in ckdir.iterdir()) == ["latest", keeps]
    assert _latest() == keeps and verify_checkpoint(ckdir / keeps) is None


def test_sigterm_of_pull_mid_rsync_stops_the_rsync_and_keeps_the_mirror(home, tmp_path, sshd):
    """Before: `pull` died of SIGTERM at once (exit 143, silent) and its rsync went on copying the
    checkpoint into the mirror's .tmp- dir, unwatched, racing the next pull's cleanup."""
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd, sshd)
    assert pull(rec, lambda _: None)["pulled"] == "step-00000004"
    _ckpt(rd, 8, os.urandom(BIG))
    p = subprocess.Popen(
        [sys.executable, "-c", "from launcher.cli import main; main()", "pull", "--run", RUN],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stray: list[int] = []
    try:
        rsync = _rsync_of("step-00000008", home)
        os.kill(rsync, signal.SIGSTOP)  # mid-copy, deterministically
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        time.sleep(0.5)
        stray = _procs_with(str(mirror_dir(RUN) / "checkpoints" / ".tmp-"))
        assert stray == [], f"rsync left running after pull ended: {stray}"
        assert p.returncode == 130, (p.returncode, err[-2000:])
        assert f"pull of {RUN} stopped by SIGTERM; the mirror keeps step-00000004" in err, err[-2000:]
        _mirror_as_it_was("step-00000004")
    finally:
        for pid in stray:
            os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_pod_whose_sshd_dies_mid_rsync_fails_the_pull_and_keeps_the_mirror(home, tmp_path, sshd):
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd, sshd)
    assert pull(rec, lambda _: None)["pulled"] == "step-00000004"
    _ckpt(rd, 8, os.urandom(BIG))
    import threading

    def kill_the_pod() -> None:
        rsync = _rsync_of("step-00000008", home)
        os.kill(rsync, signal.SIGSTOP)
        sshd.stop()  # every connection dropped, no new one answered: the pod is gone
        os.kill(rsync, signal.SIGCONT)

    killer = threading.Thread(target=kill_the_pod)
    killer.start()
    try:
        with pytest.raises(PullFailed) as e:
            pull(rec, lambda _: None)
    finally:
        killer.join()
        sshd.start()  # the server is the session's: the next tests need it back
    assert e.value.mirror_checkpoint == "step-00000004" and e.value.host_newest == "step-00000008"
    assert "pulling step-00000008 from" in e.value.message and "reachable" in e.value.fix
    _mirror_as_it_was("step-00000004")


@pytest.mark.parametrize(
    "args",
    [["pull", "--wait", "nan"], ["pull", "--wait", "inf"], ["watch", "--lost-after", "nan"],
     ["watch", "--poll", "nan"], ["watch", "--pull-every", "nan"], ["watch", "--ready-timeout", "nan"],
     ["watch", "--lost-after", "inf"]],
)  # fmt: skip
def test_seconds_that_are_not_a_finite_number_are_bad_input(home, args):
    """Before: click's FloatRange let nan through (nan < 0 is False): `watch --lost-after nan` never
    replaced a lost pod (waited >= nan is never true), `pull --wait nan` waited forever for a held
    lock. Now exit 2 naming the option and the value, before any run is looked up."""
    from click.testing import CliRunner

    from launcher.cli import cli

    res = CliRunner().invoke(cli, [*args, "--run", "nope"])
    assert res.exit_code == 2, res.output
    assert f"Invalid value for '{args[1]}'" in res.output and "finite" in res.output, res.output
    assert "unknown run" not in res.output


@pytest.fixture
def read_only(tmp_path):
    """Bind-mounts a dir read-only over itself (a full quota, a disk remounted read-only after an
    error); root only, as chmod does not stop root."""
    mounted: list[Path] = []

    def make(path: Path) -> None:
        r = subprocess.run(
            ["mount", "--bind", "-o", "ro", str(path), str(path)], capture_output=True, text=True
        )
        if r.returncode != 0:
            pytest.skip(f"cannot bind-mount read-only here: {r.stderr.strip()}")
        mounted.append(path)

    yield make
    for path in mounted:
        subprocess.run(["umount", str(path)], check=True)


def test_a_read_only_mirror_is_named_with_the_fix_that_applies(home, tmp_path, read_only):
    """Before: a read-only mirror dir was reported as "free space there" (an OSError) or "check the
    host is reachable" (rsync's receiver failing here), sending the user to the wrong machine."""
    from launcher.ssh.hosts import local_host

    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    (rd / "train.log").write_text("[nsa] step 4\n")
    node = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(rd))
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node])
    registry.save(rec)
    assert pull(rec, lambda _: None)["pulled"] == "step-00000004"
    read_only(mirror_dir(RUN))
    with (rd / "train.log").open("a") as f:
        f.write("[nsa] step 8\n")  # the run files' rsync writes first
    with pytest.raises(PullFailed) as e:
        pull(rec, lambda _: None)
    assert "Read-only file system" in e.value.message and "reachable" not in e.value.fix, e.value.fix
    assert f"make {mirror_dir(RUN)} writable" in e.value.fix, e.value.fix
    (rd / "train.log").write_text("[nsa] step 4\n")
    os.utime(rd / "train.log", ns=((mirror_dir(RUN) / "train.log").stat().st_mtime_ns,) * 2)
    _ckpt(rd, 8, b"w8" * 1000)  # the run files unchanged: the checkpoint's copy fails
    with pytest.raises(PullFailed) as e:
        pull(rec, lambda _: None)
    assert "Read-only file system" in e.value.message and "free space" not in e.value.fix, e.value.fix
    assert f"make {mirror_dir(RUN)} writable" in e.value.fix, e.value.fix
    assert e.value.mirror_checkpoint == "step-00000004" and _latest() == "step-00000004"


def test_sigterm_of_watch_mid_rsync_stops_the_rsync_and_says_what_the_mirror_keeps(home, tmp_path, sshd):
    """watch took SIGTERM as Ctrl-C already (its rsync stopped); it now also says what the mirror
    keeps and that nothing watches the run now, instead of a bare "stopped by SIGTERM"."""
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd, sshd)
    assert pull(rec, lambda _: None)["pulled"] == "step-00000004"
    _ckpt(rd, 8, os.urandom(BIG))
    p = subprocess.Popen(
        [sys.executable, "-c", "from launcher.cli import main; main()", "watch", "--run", RUN, "--poll", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stray: list[int] = []
    try:
        rsync = _rsync_of("step-00000008", home)
        os.kill(rsync, signal.SIGSTOP)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        time.sleep(0.5)
        stray = _procs_with(str(mirror_dir(RUN) / "checkpoints" / ".tmp-"))
        assert stray == [], f"rsync left running after watch ended: {stray}"
        assert p.returncode == 130, (p.returncode, err[-2000:])
        assert f"watch of {RUN} stopped by SIGTERM; the mirror keeps step-00000004" in err, err[-2000:]
        assert f"nothing watches the run now: `nsa-launch watch --run {RUN}` to watch it again" in err, err[
            -2000:
        ]
        _mirror_as_it_was("step-00000004")
    finally:
        for pid in stray:
            os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_mirror_disk_that_fills_at_the_commit_is_left_as_it_was(tmp_path, monkeypatch):
    """The checkpoint's copy fits the mirror's disk but the bookkeeping after its rename does not
    (verified.json, `latest`). Before: the new step dir stayed, unnamed, holding a checkpoint's worth
    of the full disk, and the next pull copied it again beside it (the mirror not as it was)."""
    from launcher.ssh.hosts import local_host

    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        monkeypatch.setenv("NSA_LAUNCH_HOME", str(disk / "home"))
        rd = tmp_path / "run"
        _ckpt(rd, 4, b"w4" * 1000)
        node = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(rd))
        rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node])
        registry.save(rec)
        assert pull(rec, lambda _: None)["pulled"] == "step-00000004"
        ck8 = _ckpt(rd, 8, os.urandom(100 * 4096))
        # tmpfs counts whole pages: leave exactly the pages of step-8's files (model.pt, manifest)
        need = sum(-(-f.stat().st_size // 4096) for f in ck8.iterdir())
        st = os.statvfs(disk)
        (disk / "filler").write_bytes(b"\0" * ((st.f_bavail - need) * st.f_frsize))
        with pytest.raises(PullFailed) as e:
            pull(rec, lambda _: None)
        assert "No space left on device" in e.value.message and "free space" in e.value.fix, e.value.message
        _mirror_as_it_was("step-00000004")
        # one checkpoint's worth freed (and a page for the bookkeeping): the next pull lands
        os.truncate(disk / "filler", max(0, (disk / "filler").stat().st_size - (need + 4) * st.f_frsize))
        assert pull(rec, lambda _: None)["pulled"] == "step-00000008"
    finally:
        subprocess.run(["umount", str(disk)], check=True)
