"""`mirror.pull` against a trainer that prunes (`train.keep_last`) the checkpoint being copied: the
pull pins it on the host with hard links (`checkpoints/.pull-<step-N>-<token>/`), copies from the
pin and removes it after, so a prune mid-copy costs nothing. Before: the copy failed ("check the
host is reachable") though the host answered and held a newer checkpoint, and the next pull chose
the newest again and could lose the same race forever. Real parts: the host's run dir through the
real sshd on 127.0.0.1 or locally, real rsync, the host side in a real python; the prune is a real
rmtree of the host's step dir while the pull's rsync is stopped (SIGSTOP), as the trainer's is."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.recover import mirror
from launcher.recover.mirror import PIN_PREFIX, node_mirror, pull
from launcher.run import registry
from launcher.ssh.hosts import local_host, parse_target
from nsa.runfiles import RunDir, verify_checkpoint
from tests.fixtures.checkpoints import write_checkpoint as _ckpt
from tests.unit.launcher.test_qa_recover_pull import _rsync_of

RUN = "mp1"
S4, S8, S12 = "step-00000004", "step-00000008", "step-00000012"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(mirror, "_TOLD_NO_LINKS", set())
    return tmp_path / "home"


def _record(*run_dirs: Path, host=None) -> registry.RunRecord:
    nodes = [
        registry.NodeRecord(host or local_host(), str(PROJECT_ROOT), sys.executable, str(rd))
        for rd in run_dirs
    ]
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=nodes)
    registry.save(rec)
    return rec


def _pins(rd: Path) -> list[str]:
    return sorted(p.name for p in (rd / "checkpoints").iterdir() if p.name.startswith(PIN_PREFIX))


def _mirrored(node: int = 0) -> str | None:
    ck = RunDir(node_mirror(RUN, node)).latest_checkpoint()
    assert ck is None or verify_checkpoint(ck) is None, ck
    return ck.name if ck else None


@pytest.mark.parametrize("where", ["node 0 over ssh", "node 1's part"])
def test_a_checkpoint_the_host_prunes_mid_copy_is_still_mirrored(home, tmp_path, sshd, where):
    """The pull's rsync of step-8 is stopped; meanwhile the trainer saves step-12 and prunes step-8
    (keep_last 1: what keep_last 3 does to a copy slower than three saves). The copy goes on from
    the pin and the mirror gets step-8, intact; the pin is gone afterwards, and so is step-8 on the
    host (the pin never brings a pruned checkpoint back)."""
    rd0, rd1 = tmp_path / "run0", tmp_path / "run1"
    if where == "node 0 over ssh":
        rec = _record(rd0, host=parse_target(sshd.alias, str(sshd.ssh_config)))
        victim = rd0
    else:
        rec = _record(rd0, rd1)
        victim = rd1
    for rd in rec.nodes:
        _ckpt(Path(rd.run_dir), 4, b"w4" * 1000)
    assert pull(rec, lambda _: None)["pulled"] == S4
    for rd in rec.nodes:
        _ckpt(Path(rd.run_dir), 8, os.urandom(1024 * 1024))
    said: list[str] = []

    def the_trainer_saves_and_prunes() -> None:
        rsync = _rsync_of(S8, home)  # node 1's part is fetched first, node 0's last
        os.kill(rsync, signal.SIGSTOP)
        try:
            for rd in rec.nodes:
                _ckpt(Path(rd.run_dir), 12, b"w12" * 1000)
            shutil.rmtree(victim / "checkpoints" / S8)
        finally:
            os.kill(rsync, signal.SIGCONT)

    trainer = threading.Thread(target=the_trainer_saves_and_prunes)
    trainer.start()
    try:
        res = pull(rec, said.append)
    finally:
        trainer.join()
    assert res["pulled"] == S8 and _mirrored() == S8, said
    if len(rec.nodes) > 1:
        assert _mirrored(1) == S8
    assert _pins(victim) == [] and not (victim / "checkpoints" / S8).exists()
    assert pull(rec, said.append)["pulled"] == S12 and _pins(victim) == []  # the next one comes in


def _link_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=os.link)  # what the pull's `cp -al` makes
    return dst


def test_a_pin_is_no_checkpoint_to_the_trainer_or_the_scan(home, tmp_path):
    """A pin holding a checkpoint the trainer pruned is not listed, resumed from, pruned or scanned:
    its "." name is outside the step-<N> namespace (runfiles.checkpoint_step)."""
    from nsa.train.ckpt import _prune, choose_resume

    rd = tmp_path / "run"
    ck4 = _ckpt(rd, 4, b"w4" * 1000)
    pin = _link_copy(ck4, rd / "checkpoints" / f"{PIN_PREFIX}{S4}-1-abc")
    shutil.rmtree(ck4)  # pruned while pinned
    ck8 = _ckpt(rd, 8, b"w8" * 1000)
    _ckpt(rd, 12, b"w12" * 1000)
    assert [p.name for p in RunDir(rd).checkpoints()] == [S12, S8]
    _prune(rd / "checkpoints", 1, keep=rd / "checkpoints" / S12)  # the trainer's, keep_last 1
    assert not ck8.exists() and pin.is_dir() and verify_checkpoint(pin) is None
    assert choose_resume(RunDir(rd)) == (rd / "checkpoints" / S12, [])
    rec = _record(rd)
    assert mirror._scan_host(local_host_transport(), rec.nodes[0], -1) == [(S12, None)]


def local_host_transport():
    from launcher.ssh.remote import transport_for

    return transport_for(local_host())


def test_a_stale_pin_goes_with_the_next_pull_and_a_live_one_stays(home, tmp_path):
    """A pin left by a killed pull (over PIN_STALE_S old) is removed by the next pull that copies a
    checkpoint; a younger one (another machine's pull, copying now) is left alone."""
    rd = tmp_path / "run"
    ck4 = _ckpt(rd, 4, b"w4" * 1000)
    stale = _link_copy(ck4, rd / "checkpoints" / f"{PIN_PREFIX}{S4}-1-dead")
    live = _link_copy(ck4, rd / "checkpoints" / f"{PIN_PREFIX}{S4}-2-live")
    old = time.time() - mirror.PIN_STALE_S - 60
    os.utime(stale, (old, old))
    os.utime(live, (old + 120, old + 120))
    rec = _record(rd)
    assert pull(rec, lambda _: None)["pulled"] == S4
    assert _pins(rd) == [live.name] and verify_checkpoint(live) is None


def test_a_checkpoint_pruned_before_it_was_pinned_is_named_and_a_newer_one_pulled(
    home, tmp_path, monkeypatch
):
    """Between the host's scan and the pin the trainer saves and prunes the chosen checkpoint: the
    pull says so and takes the newer one. A host that wins that race PRUNED_TRIES times in a row
    fails the pull with the truth (not "check the host is reachable"), the mirror as it was."""
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd)
    assert pull(rec, lambda _: None)["pulled"] == S4
    _ckpt(rd, 8, b"w8" * 1000)
    real, saves = mirror._scan_host, [12]

    def scan_then_the_trainer_saves(t, node, above):
        found = real(t, node, above)
        if saves:
            step = saves.pop(0)
            _ckpt(rd, step, b"w%d" % step * 1000)
            shutil.rmtree(rd / "checkpoints" / found[0][0])  # the one just chosen, pruned
        return found

    monkeypatch.setattr(mirror, "_scan_host", scan_then_the_trainer_saves)
    said: list[str] = []
    res = pull(rec, said.append)
    assert res["pulled"] == S12 and _mirrored() == S12 and _pins(rd) == []
    assert any(
        f"{RUN}: {S8} was pruned on local before it could be copied" in s and "newer checkpoint" in s
        for s in said
    ), said
    _ckpt(rd, 16, b"w16" * 1000)
    saves[:] = [20, 24, 28]
    with pytest.raises(mirror.PullFailed) as e:
        pull(rec, said.append)
    assert "step-00000024 was pruned on local before it could be copied" in e.value.message, e.value.message
    assert "train.keep_last" in e.value.message and "reachable" not in e.value.fix, e.value.fix
    assert e.value.mirror_checkpoint == S12 and _mirrored() == S12 and _pins(rd) == []


def test_a_failed_or_interrupted_pull_removes_its_pin(home, tmp_path, monkeypatch):
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd)
    assert pull(rec, lambda _: None)["pulled"] == S4
    _ckpt(rd, 8, os.urandom(1024 * 1024))
    stopped: list[int] = []

    def interrupt() -> None:
        rsync = _rsync_of(S8, home)
        os.kill(rsync, signal.SIGSTOP)
        stopped.append(rsync)
        assert len(_pins(rd)) == 1  # it copies from a pin
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    t = threading.Thread(target=interrupt)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pull(rec, lambda _: None)
    finally:
        t.join()
    assert stopped and _pins(rd) == [] and _mirrored() == S4
    assert not list((node_mirror(RUN, 0) / "checkpoints").glob(".tmp-*"))
    # a copy that fails: bytes damaged after the pin (on the host here; the pin shares its inodes)
    real = mirror.rsync_pull

    def rot_then_copy(t, remote, dest, **kw):
        if "/.pull-" in remote[0]:
            f = Path(remote[0]) / "model.pt"
            f.write_bytes(b"x" * f.stat().st_size)
        real(t, remote, dest, **kw)

    monkeypatch.setattr(mirror, "rsync_pull", rot_then_copy)
    with pytest.raises(mirror.PullFailed) as e:
        pull(rec, lambda _: None)
    assert "does not verify here" in e.value.message and _pins(rd) == [] and _mirrored() == S4


@pytest.fixture
def bind_mounts():
    """`mount --bind D D`: D is another mount, so a hard link from D to its parent dir fails (EXDEV)
    as on a host whose checkpoints dir spans filesystems. Root only."""
    mounted: list[Path] = []

    def make(path: Path) -> None:
        r = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {r.stderr.strip()}")
        mounted.append(path)

    yield make
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_host_that_cannot_hard_link_is_copied_unpinned_and_said_once(home, tmp_path, bind_mounts):
    """cp -al fails (EXDEV): the pull copies the checkpoint itself, as before pins, and says so once
    per run; a prune during such a copy is named as one and a newer checkpoint pulled."""
    rd = tmp_path / "run"
    rec = _record(rd)
    bind_mounts(_ckpt(rd, 4, b"w4" * 1000))
    said: list[str] = []
    assert pull(rec, said.append)["pulled"] == S4 and _pins(rd) == []
    told = [s for s in said if "cannot hard-link" in s]
    assert len(told) == 1 and "unpinned" in told[0] and "Invalid cross-device link" in told[0], said
    ck8 = _ckpt(rd, 8, os.urandom(1024 * 1024))
    bind_mounts(ck8)

    def the_trainer_saves_and_prunes() -> None:
        rsync = _rsync_of(S8, home)
        os.kill(rsync, signal.SIGSTOP)
        try:
            _ckpt(rd, 12, b"w12" * 1000)
            subprocess.run(["umount", "-l", str(ck8)], check=True)
            shutil.rmtree(ck8)
        finally:
            os.kill(rsync, signal.SIGCONT)

    trainer = threading.Thread(target=the_trainer_saves_and_prunes)
    trainer.start()
    try:
        res = pull(rec, said.append)
    finally:
        trainer.join()
    assert res["pulled"] == S12 and _mirrored() == S12 and _pins(rd) == []
    assert any(
        f"{S8} was pruned on local before it could be copied (during an unpinned copy" in s for s in said
    ), said
    assert len([s for s in said if "cannot hard-link" in s]) == 1, said


def test_a_pin_cut_short_by_a_prune_is_named_and_a_newer_one_pulled(home, tmp_path, monkeypatch):
    """The trainer's rmtree of the checkpoint runs while `cp -al` links it: the pin lacks a file the
    manifest lists and the checkpoint is gone. The verification here finds the missing file; the
    pull names the prune (not a damaged transfer) and takes the newer checkpoint."""
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd)
    assert pull(rec, lambda _: None)["pulled"] == S4
    _ckpt(rd, 8, b"w8" * 1000)
    real, raced = mirror.rsync_pull, []

    def the_prune_raced_the_pin(t, remote, dest, **kw):
        if f"/{PIN_PREFIX}{S8}-" in remote[0] and not raced:
            raced.append(remote[0])
            (Path(remote[0]) / "model.pt").unlink()  # as cp -al finds it, half-way through an rmtree
            _ckpt(rd, 12, b"w12" * 1000)
            shutil.rmtree(rd / "checkpoints" / S8)
        real(t, remote, dest, **kw)

    monkeypatch.setattr(mirror, "rsync_pull", the_prune_raced_the_pin)
    said: list[str] = []
    assert pull(rec, said.append)["pulled"] == S12 and raced and _pins(rd) == []
    assert any(f"{S8} was pruned on local before it could be copied (pinned in part: " in s for s in said), (
        said
    )
    assert _mirrored() == S12
