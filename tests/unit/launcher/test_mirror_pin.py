"""`mirror.pull` against a trainer that prunes (`train.keep_last`) the checkpoint being copied: the
pull pins it on the host with hard links (`checkpoints/.pull-<step-N>-<token>/`), copies from the
pin and removes it after, so a prune mid-copy costs nothing. Before: the copy failed ("check the
host is reachable") though the host answered and held a newer checkpoint, and the next pull chose
the newest again and could lose the same race forever. Real parts: the host's run dir through the
real sshd on 127.0.0.1 or locally, real rsync, the host side in a real python; the prune is a real
rmtree of the host's step dir as the pull's copy begins (`rsync_pull` wrapped: stopping the rsync
instead raced a 1 MB copy that could finish first), as the trainer's is."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.recover import mirror
from launcher.recover.mirror import PIN_PREFIX, node_mirror, pull
from launcher.run import registry
from launcher.ssh.hosts import local_host, parse_target
from launcher.ssh.remote import transport_for
from nsa.runfiles import RunDir, verify_checkpoint
from tests.fixtures.checkpoints import write_checkpoint as _ckpt

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
def test_a_checkpoint_the_host_prunes_mid_copy_is_still_mirrored(home, tmp_path, sshd, where, monkeypatch):
    """As the pull's copy of step-8 from its pin begins, the trainer saves step-12 and prunes step-8
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

    real = mirror.rsync_pull

    def the_trainer_saves_and_prunes(t, remote, dest, **kw):
        # As the first copy of step 8 begins (node 1's part is fetched first, node 0's last), from its
        # pin: a save, then step 8 pruned. (Stopping the rsync to do it raced a 1 MB copy, which can
        # finish first: a fresh clone's run of this file's unpinned case did.)
        if "/.pull-" in remote[0] and (victim / "checkpoints" / S8).exists():
            for rd in rec.nodes:
                _ckpt(Path(rd.run_dir), 12, b"w12" * 1000)
            shutil.rmtree(victim / "checkpoints" / S8)
        return real(t, remote, dest, **kw)

    monkeypatch.setattr(mirror, "rsync_pull", the_trainer_saves_and_prunes)
    res = pull(rec, said.append)
    monkeypatch.setattr(mirror, "rsync_pull", real)
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
    scan = mirror._scan_host(transport_for(local_host()), _record(rd).nodes[0], -1)
    assert scan.checked == [(S12, None)] and scan.pin and scan.pin.startswith(f"{PIN_PREFIX}{S12}-")
    assert (
        _pins(rd) == sorted([pin.name, scan.pin]) and verify_checkpoint(rd / "checkpoints" / scan.pin) is None
    )


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


def test_a_checkpoint_pruned_after_the_scan_chose_it_is_copied_from_the_scans_pin(
    home, tmp_path, monkeypatch
):
    """The host's scan pins the checkpoint before hashing it: the trainer saving and pruning it just
    after the scan answered costs the pull nothing."""
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd)
    assert pull(rec, lambda _: None)["pulled"] == S4
    _ckpt(rd, 8, b"w8" * 1000)
    real = mirror._scan_host

    def scan_then_the_trainer_saves(t, node, above):
        found = real(t, node, above)
        _ckpt(rd, 12, b"w12" * 1000)
        shutil.rmtree(rd / "checkpoints" / found.checked[0][0])  # the one just chosen, pruned
        return found

    monkeypatch.setattr(mirror, "_scan_host", scan_then_the_trainer_saves)
    res = pull(rec, lambda _: None)
    assert res["pulled"] == S8 and _mirrored() == S8 and _pins(rd) == []
    assert not (rd / "checkpoints" / S8).exists()


@pytest.mark.parametrize("race", ["gone before cp", "cp cut short"])
def test_a_checkpoint_pruned_during_the_scan_is_skipped_not_called_corrupt(home, tmp_path, monkeypatch, race):
    """The trainer's rmtree of a listed checkpoint lands before the scan's `cp -al`, or during it (the
    pin lacks a file; its hash check fails): the scan skips it (no "corrupt"), and pins and takes the
    next intact one. The race is a `cp` first on PATH that prunes, around the real cp."""
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd)
    assert pull(rec, lambda _: None)["pulled"] == S4
    _ckpt(rd, 12, b"w12" * 1000)
    ck16 = _ckpt(rd, 16, b"w16" * 1000)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    real_cp = shutil.which("cp")
    before = f"rm -rf -- {ck16}" if race == "gone before cp" else ":"
    after = f'rm -f -- "$4/model.pt"; rm -rf -- {ck16}' if race == "cp cut short" else ":"
    (bin_ / "cp").write_text(
        f'#!/bin/sh\nif [ "$3" = {ck16} ]; then {before}; {real_cp} "$@"; s=$?; {after}; exit $s; fi\n'
        f'exec {real_cp} "$@"\n'
    )
    (bin_ / "cp").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    said: list[str] = []
    res = pull(rec, said.append)
    assert not ck16.exists() and res["corrupt"] == [] and res["host_checked"] == [S12], res
    assert res["pulled"] == S12 and _mirrored() == S12 and _pins(rd) == []
    assert not any("corrupt" in s for s in said), said


def test_a_failed_or_interrupted_pull_removes_its_pin(home, tmp_path, monkeypatch):
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    rec = _record(rd)
    assert pull(rec, lambda _: None)["pulled"] == S4
    _ckpt(rd, 8, os.urandom(1024 * 1024))
    stopped: list[int] = []
    real = mirror.rsync_pull

    def interrupted(t, remote, dest, **kw):
        # a Ctrl-C as the copy starts (transfer.py holds it over the spawn, then stops the rsync)
        if "/.pull-" in remote[0]:
            stopped.append(len(_pins(rd)))  # it copies from a pin
            signal.raise_signal(signal.SIGINT)
        return real(t, remote, dest, **kw)

    monkeypatch.setattr(mirror, "rsync_pull", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pull(rec, lambda _: None)
    monkeypatch.setattr(mirror, "rsync_pull", real)
    assert stopped == [1] and _pins(rd) == [] and _mirrored() == S4
    assert not list((node_mirror(RUN, 0) / "checkpoints").glob(".tmp-*"))
    # a copy that fails: bytes damaged after the pin (on the host here; the pin shares its inodes)

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


def test_a_host_that_cannot_hard_link_is_copied_unpinned_and_said_once(
    home, tmp_path, bind_mounts, monkeypatch
):
    """cp -al fails (EXDEV): the pull copies the checkpoint itself, as before pins, and says so once
    per run; a prune during such a copy is named as one and a newer checkpoint pulled; PRUNED_TRIES
    such prunes in a row fail the pull with that truth, the mirror as it was."""
    rd = tmp_path / "run"
    rec = _record(rd)
    bind_mounts(_ckpt(rd, 4, b"w4" * 1000))
    said: list[str] = []
    assert pull(rec, said.append)["pulled"] == S4 and _pins(rd) == []
    told = [s for s in said if "cannot hard-link" in s]
    assert len(told) == 1 and "unpinned" in told[0] and "Invalid cross-device link" in told[0], said
    ck8 = _ckpt(rd, 8, os.urandom(1024 * 1024))
    bind_mounts(ck8)

    real = mirror.rsync_pull

    def the_trainer_saves_and_prunes(t, remote, dest, **kw):
        # As the unpinned copy of step 8 begins: a save, then step 8 pruned. (Catching the rsync to stop
        # it raced the copy of 1 MB, which once finished first in a fresh clone: the pull got step 8.)
        if Path(remote[0].rstrip("/")).name == S8 and ck8.exists():
            _ckpt(rd, 12, b"w12" * 1000)
            subprocess.run(["umount", "-l", str(ck8)], check=True)
            shutil.rmtree(ck8)
        return real(t, remote, dest, **kw)

    monkeypatch.setattr(mirror, "rsync_pull", the_trainer_saves_and_prunes)
    res = pull(rec, said.append)
    monkeypatch.setattr(mirror, "rsync_pull", real)
    assert res["pulled"] == S12 and _mirrored() == S12 and _pins(rd) == []
    assert any(
        f"{S8} was pruned on local before it could be copied (during an unpinned copy" in s for s in said
    ), said
    assert len([s for s in said if "cannot hard-link" in s]) == 1, said
    # every unpinned copy loses its checkpoint to a save and a prune: the third in a row fails
    _ckpt(rd, 16, b"w16" * 1000)
    bind_mounts(rd / "checkpoints" / "step-00000016")

    def the_trainer_wins(t, remote, dest, **kw):
        src = Path(remote[0].rstrip("/"))
        if src.parent.name == "checkpoints" and src.name.startswith("step-"):
            step = int(src.name.split("-")[1])
            bind_mounts(_ckpt(rd, step + 4, b"w%d" % step * 1000))
            subprocess.run(["umount", "-l", str(src)], check=True)
            (src / "model.pt").unlink()  # rsync lists the dir half-way through the trainer's rmtree
            try:
                real(t, remote, dest, **kw)
            finally:
                shutil.rmtree(src)
        else:
            real(t, remote, dest, **kw)

    monkeypatch.setattr(mirror, "rsync_pull", the_trainer_wins)
    with pytest.raises(mirror.PullFailed) as e:
        pull(rec, said.append)
    assert "step-00000024 was pruned on local before it could be copied (copied in part: " in e.value.message
    assert "train.keep_last" in e.value.message and "reachable" not in e.value.fix, e.value.fix
    assert e.value.mirror_checkpoint == S12 and _mirrored() == S12 and _pins(rd) == []
    assert sum(f"{RUN}: step-000000{n} was pruned on local" in s for s in said for n in (16, 20)) == 2, said
