"""The local checkpoint mirror: a run's newest INTACT checkpoint, metrics, events and log, kept on the
launching machine ($NSA_LAUNCH_HOME/mirror/<run>/), and pushed to a replacement host on restore.

Owns `pull` (node 0's run dir -> mirror, with rsync over the verified SSH, or a copy for local runs)
and `push` (mirror -> a new run dir). The mirror only moves forward: it keeps its newest verified
checkpoint until a NEWER one has been copied, verified here, fsynced and renamed into place, and only
then does `checkpoints/latest` name it and are the older ones pruned. A host checkpoint that fails
verification is reported ("host's step-N is corrupt ...; the mirror keeps step-M"), never taken in
place of a newer good copy. Copies land in `.tmp-step-N.<pid>` first and are removed when a pull
fails. The host's checkpoint is copied from a pin, `checkpoints/.pull-<step-N>-<token>/` on the
host: hard links to its files, made by the host's scan before it hashes them and removed after the
copy, so the trainer pruning it meanwhile (`train.keep_last`) costs the copy nothing, and one pruned
during the scan is skipped, not called corrupt; a host that cannot hard-link is copied from
unpinned, and a prune during such a copy is named and a newer checkpoint pulled.
Hashing is paid once per checkpoint: the host verifies only checkpoints newer than the mirror's, and
a mirrored checkpoint whose files are unchanged since it verified here (sizes, mtimes) is not hashed
again (`verified.json`); a restore (`push`) always verifies with hashes.

A multi-node run's checkpoint is split: node 0 holds the weights and optimizer, every other node k its
ranks' data state and RNG (a few kB) in its own run dir; those parts go to `nodes/<k>/checkpoints/`
and are pulled only when every node's newest intact checkpoint is the same step, before node 0's
`latest` names it (the commit point). Every pull holds the run's write lock (launcher/run/locks.py) and
re-reads the run record under it. It must not start or stop runs.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from launcher.core.errors import LaunchError, RuntimeFailure
from launcher.recover.transfer import durable_write_text, fsync_dir, fsync_tree, rsync_pull, rsync_push
from launcher.run import registry
from launcher.run.locks import run_lock
from launcher.run.registry import RunRecord, mirror_dir
from launcher.ssh.remote import transport_for
from launcher.ssh.transport import Transport

# The run-dir files worth keeping off the pod besides the checkpoint (small, append-only or whole).
FILES = ("manifest.json", "launch_config.yaml", "config.yaml", "metrics.jsonl", "events.jsonl", "train.log")
VERIFIED = "verified.json"  # mirror-relative checkpoint path -> signature of its files when it verified
# checkpoints/.pull-<step-N>-<token>/ on a host: a pull's hard-linked pin of the checkpoint it copies.
# A "." name is no checkpoint to the trainer, its pruning or the scan (runfiles.checkpoint_step).
PIN_PREFIX = ".pull-"
# A pin older than this is a pull's that was killed (or lost the host) before removing it; the next
# pull removes it. Only another machine's pull of the same run can hold a pin that long and alive
# (this machine's pulls of a run take its write lock): a copy of over an hour, which then fails and
# is tried again. An hour of a pruned checkpoint's disk held on the host is the cost the other way.
PIN_STALE_S = 3600.0
PRUNED_TRIES = 3  # checkpoints pruned under an unpinned copy, in a row: then the pull fails
_TOLD_NO_LINKS: set[tuple[str, int]] = set()  # (run, node) whose host was said to have no hard links


class PullFailed(RuntimeFailure):
    """A pull that did not complete, with what the mirror and the host hold (for watch's exit)."""

    def __init__(self, err: LaunchError, mirror: str | None, host_newest: str | None):
        self.mirror_checkpoint, self.host_newest = mirror, host_newest
        super().__init__(err.message, err.fix)


def node_mirror(run: str, node: int) -> Path:
    """Where node `node`'s part of a multi-node checkpoint is mirrored (node 0's is the mirror itself)."""
    return mirror_dir(run) if node == 0 else mirror_dir(run) / "nodes" / str(node)


def _step(name: str | None) -> int:
    from nsa.runfiles import checkpoint_step

    s = checkpoint_step(name) if name else None
    return -1 if s is None else s


# --- verification, hashed once ------------------------------------------------------------------
def _signature(ckpt: Path) -> str:
    """What changes when any file of a checkpoint dir is rewritten: every file's name, size, mtime."""
    rows = []
    for p in sorted(ckpt.rglob("*")):
        if p.is_file():
            st = p.stat()
            rows.append(f"{p.relative_to(ckpt).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def _cache(run: str) -> dict[str, str]:
    try:
        d = json.loads((mirror_dir(run) / VERIFIED).read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def verify_mirrored(run: str, ckpt: Path, *, hashes: bool = False) -> str | None:
    """verify_checkpoint of a mirrored checkpoint; without `hashes`, one whose files are unchanged since
    it last verified here is trusted without hashing it again."""
    from nsa.runfiles import verify_checkpoint

    key = ckpt.relative_to(mirror_dir(run)).as_posix()
    if not hashes and ckpt.is_dir() and _cache(run).get(key) == _signature(ckpt):
        return None
    why = verify_checkpoint(ckpt)
    if why is None:
        _remember(run, ckpt)
    return why


def _remember(run: str, ckpt: Path) -> None:
    from nsa.runfiles import atomic_write_json

    cache = {k: v for k, v in _cache(run).items() if (mirror_dir(run) / k).is_dir()}
    cache[ckpt.relative_to(mirror_dir(run)).as_posix()] = _signature(ckpt)
    atomic_write_json(mirror_dir(run) / VERIFIED, cache)


def newest_verified(run: str, node: int = 0) -> Path | None:
    """The mirror's newest checkpoint that verifies: the one `latest` names, else (a `latest` naming a
    missing or damaged dir) the newest step dir that does."""
    from nsa.runfiles import RunDir

    rd = RunDir(node_mirror(run, node))
    named = rd.latest_checkpoint()
    if named is not None and verify_mirrored(run, named) is None:
        return named
    return next((p for p in rd.checkpoints() if verify_mirrored(run, p) is None), None)


def _part_problem(run: str, node: int, ckpt: str, *, hashes: bool = False) -> str | None:
    """Why node `node`'s part of the mirrored checkpoint `ckpt` cannot be restored, or None."""
    from nsa.runfiles import CHECKPOINTS_DIR

    why = verify_mirrored(run, node_mirror(run, node) / CHECKPOINTS_DIR / ckpt, hashes=hashes)
    if why is None:
        return None
    if node == 0:
        return f"the mirror's {ckpt} does not verify ({why})"
    return f"the mirror holds node 0's {ckpt} but not node {node}'s part of it ({why})"


def missing_parts(rec: RunRecord, *, hashes: bool = False) -> str | None:
    """Why the mirror cannot restore every node of the run (a node's part of its checkpoint is missing
    or damaged), or None: it can (or it holds no checkpoint at all, and a restore starts at step 0).
    With `hashes` node 0's checkpoint and every part are hashed again (before a restore)."""
    from nsa.runfiles import RunDir

    ck = RunDir(mirror_dir(rec.run)).latest_checkpoint()
    if ck is None:
        return None
    nodes = range(0 if hashes else 1, len(rec.nodes))
    return next((p for k in nodes if (p := _part_problem(rec.run, k, ck.name, hashes=hashes))), None)


# --- the host side ------------------------------------------------------------------------------
# Each candidate is pinned first (cp -al: hard links, no data copied; see _pin) and the pin hashed:
# what verifies is what the pull copies, whatever the trainer prunes meanwhile, and one pruned
# while listed, pinned or hashed is skipped, not called corrupt. The intact one's pin is kept for the
# copy; the pull removes it. Stale pins (pulls killed before removing theirs) go first.
_SCAN = """\
import json, os, shutil, subprocess, sys, time
from nsa.runfiles import RunDir, checkpoint_step, verify_checkpoint
rd, above, token, prefix, stale = RunDir(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
for old in rd.checkpoints_dir.glob(prefix + "*"):
    try:
        if time.time() - old.stat().st_mtime > stale:
            shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass
out, pin, nolink = [], None, None
for p in rd.checkpoints():
    if checkpoint_step(p.name) <= above:
        break
    dst = p.with_name(prefix + p.name + "-" + token)
    r = subprocess.run(["cp", "-al", "--", str(p), str(dst)], capture_output=True, text=True)
    if r.returncode == 0:
        os.utime(dst)  # cp -a kept the checkpoint's mtime: the pin's age counts from now
    else:
        shutil.rmtree(dst, ignore_errors=True)
        if not p.is_dir() or "No such file" in r.stderr:
            continue
        nolink = (r.stderr.strip().splitlines() or ["cp -al exit %d" % r.returncode])[-1]
    why = verify_checkpoint(dst if r.returncode == 0 else p)
    if why is None:
        pin = dst.name if r.returncode == 0 else None
        out.append([p.name, None])
        break
    shutil.rmtree(dst, ignore_errors=True)
    if p.is_dir():
        out.append([p.name, why])
print(json.dumps({"checked": out, "pin": pin, "nolink": nolink}))
"""


class Scan(NamedTuple):
    checked: list[tuple[str, str | None]]  # newest first, why each does not verify (None: intact)
    pin: str | None  # the intact one's pin on the host (None: none intact, or no hard links there)
    nolink: str | None  # why the host cannot hard-link (cp -al's last words), or None


def _scan_host(t: Transport, node: registry.NodeRecord, above: int) -> Scan:
    """The host's checkpoints newer than step `above`, newest first, each with why it does not verify
    (None: intact), down to the first intact one, which stays pinned (the caller removes the pin).
    Older ones are not hashed: the mirror has newer. A pin made before an answer that was lost goes
    with a later pull (PIN_STALE_S)."""
    token = f"{os.getpid()}-{secrets.token_hex(3)}"
    args = [node.run_dir, str(above), token, PIN_PREFIX, str(PIN_STALE_S)]
    cmd = f"cd {shlex.quote(node.workdir)} && {shlex.quote(node.python)} -c {shlex.quote(_SCAN)} " + " ".join(
        shlex.quote(a) for a in args
    )
    out = t.run(cmd, timeout=600).stdout.strip().splitlines()
    d = json.loads(out[-1]) if out else {"checked": [], "pin": None, "nolink": None}
    return Scan([(n, w) for n, w in d["checked"]], d["pin"], d["nolink"])


class CheckpointPruned(RuntimeFailure):
    """The host's checkpoint went (pruned by the trainer's train.keep_last) during an unpinned copy
    (a host without hard links) or before _pin came to it: the host has a newer one."""

    def __init__(self, ckpt: str, node: int, label: str, why: str):
        self.ckpt, self.node = ckpt, node
        part = f"node {node}'s part of {ckpt}" if node else ckpt
        super().__init__(
            f"{part} was pruned on {label} before it could be copied ({why}; the trainer keeps its "
            "last train.keep_last checkpoints)",
            "pull again: the next pull copies the host's newer checkpoint",
        )


def _pin(t: Transport, k: int, node: registry.NodeRecord, ckpt: str) -> tuple[str | None, str | None]:
    """Pin node `k`'s run_dir/checkpoints/<ckpt> on t, for a copy no scan pinned (a lost part of the
    mirror's own checkpoint, fetched again): one remote shell command removes stale pins and
    hard-links the checkpoint's files into a new pin (`cp -al`: no data copied; the files' blocks
    stay while the pin names them, whatever the trainer prunes). Returns (pin name, None), or (None,
    why the host cannot hard-link); raises CheckpointPruned when the checkpoint is gone already. A
    cp racing a prune can leave a pin short of a file: the verification here finds that, and _fetch
    names it (_vanished)."""
    from nsa.runfiles import CHECKPOINTS_DIR

    pin = f"{PIN_PREFIX}{ckpt}-{os.getpid()}-{secrets.token_hex(3)}"
    src, dst = shlex.quote(ckpt), shlex.quote(pin)
    cmd = (
        f"cd {shlex.quote(f'{node.run_dir}/{CHECKPOINTS_DIR}')} && "
        f"find . -maxdepth 1 -name {shlex.quote(PIN_PREFIX + '*')} -mmin +{int(PIN_STALE_S // 60)} "
        "-exec rm -rf -- {} + 2>/dev/null; "
        # cp -a keeps the checkpoint's mtime on the pin's dir: touch it, its age counts from now
        f"if e=$(cp -al -- {src} {dst} 2>&1); then touch -- {dst} && echo pinned; "
        f"else rm -rf -- {dst}; if [ -d {src} ] && ! printf %s \"$e\" | grep -q 'No such file'; "
        "then printf '%s\\n' \"$e\" | tail -n 1 | sed 's/^/nolink /'; else echo gone; fi; fi"
    )
    said = (
        t.run(cmd, timeout=600).stdout.strip().splitlines() or ["nolink the pin command printed nothing"]
    )[-1]
    if said == "pinned":
        return pin, None
    if said == "gone":
        raise CheckpointPruned(ckpt, k, t.label, "it was gone when the pull came to pin it")
    return None, said.removeprefix("nolink ")


def _unpin(t: Transport, node: registry.NodeRecord, pin: str) -> None:
    """Remove a pin; one left behind (a host that stopped answering) goes with a later pull."""
    from nsa.runfiles import CHECKPOINTS_DIR

    with contextlib.suppress(LaunchError, OSError):
        t.run(f"rm -rf -- {shlex.quote(f'{node.run_dir}/{CHECKPOINTS_DIR}/{pin}')}", timeout=60, check=False)


def _vanished(t: Transport, node: registry.NodeRecord, ckpt: str) -> bool:
    """Whether the host answers that its checkpoint `ckpt` is gone (False when it does not answer)."""
    from nsa.runfiles import CHECKPOINTS_DIR

    try:
        path = shlex.quote(f"{node.run_dir}/{CHECKPOINTS_DIR}/{ckpt}")
        return t.run(f"test -d {path} && echo here || echo gone", timeout=60).stdout.strip() == "gone"
    except (LaunchError, OSError):
        return False


# --- writing the mirror -------------------------------------------------------------------------
def _fetch(
    t: Transport,
    run: str,
    k: int,
    node: registry.NodeRecord,
    ckpt: str,
    dest: Path,
    say: Callable[[str], None],
    pinned: tuple[str | None, str | None] | None = None,
) -> Path:
    """Copy node `k`'s run_dir/checkpoints/<ckpt> from t, through its pin, into
    dest/checkpoints/.tmp-<ckpt>.<pid> and verify it there (hashing it once). `pinned`: (pin, why
    the host cannot hard-link) from the scan, whose caller removes that pin; without it the pin is
    made here (_pin) and removed here. The temporary dir is removed when anything fails."""
    from nsa.runfiles import CHECKPOINTS_DIR, verify_checkpoint

    tmp = dest / CHECKPOINTS_DIR / f".tmp-{ckpt}.{os.getpid()}"
    own = pinned is None
    pin, nolink = _pin(t, k, node, ckpt) if pinned is None else pinned
    if nolink is not None and (run, k) not in _TOLD_NO_LINKS:
        _TOLD_NO_LINKS.add((run, k))
        say(
            f"{t.label} cannot hard-link {run}'s checkpoints ({nolink}); copying them unpinned: "
            "a save that prunes one mid-copy fails that pull, and the next pulls a newer one"
        )
    try:
        try:
            rsync_pull(t, [f"{node.run_dir}/{CHECKPOINTS_DIR}/{pin or ckpt}/"], tmp, name=ckpt)
        except RuntimeFailure as e:
            # unpinned, a prune mid-copy reads as files that vanished (a pin's files cannot)
            if (
                pin is None
                and ("vanished" in e.message or "No such file" in e.message)
                and _vanished(t, node, ckpt)
            ):
                raise CheckpointPruned(ckpt, k, t.label, "during an unpinned copy") from None
            raise
        shutil.rmtree(tmp / ".rsync-partial", ignore_errors=True)
        why = verify_checkpoint(tmp)
        if why is not None:
            # a whole file missing, and the checkpoint gone: the prune raced the pin's cp (or the
            # unpinned rsync's start); damaged bytes are the transfer's, whatever the host did since
            if ": missing" in why and _vanished(t, node, ckpt):
                raise CheckpointPruned(ckpt, k, t.label, f"{'pinned' if pin else 'copied'} in part: {why}")
            raise RuntimeFailure(
                f"the pulled checkpoint {ckpt} from {t.label} does not verify here: {why}",
                "pull again (the host copy verified; the transfer was damaged)",
            )
        fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if own and pin is not None:
            _unpin(t, node, pin)
    return tmp


def _commit(run: str, dest: Path, tmp: Path, ckpt: str) -> None:
    """Rename a verified, fsynced .tmp- copy into place, then (only then) name it in `latest`; a copy
    that could not be named is removed again (the mirror as it was)."""
    from nsa.runfiles import CHECKPOINTS_DIR, LATEST, RunDir

    final = dest / CHECKPOINTS_DIR / ckpt
    if final.exists():  # an older damaged copy of the same step: never the newest verified one
        shutil.rmtree(final)
    tmp.rename(final)
    try:
        fsync_dir(final.parent)
        _remember(run, final)
        durable_write_text(dest / CHECKPOINTS_DIR / LATEST, ckpt + "\n")
    except BaseException:
        # A disk that fills here (the copy fitted, verified.json or `latest` did not) must not keep an
        # unnamed copy: it held a checkpoint's worth of the full disk, and the next pull copied it again
        # beside it (the qa walk of 2026-11-27). Taken back unless `latest` names it.
        if RunDir(dest).latest_checkpoint() != final:
            shutil.rmtree(final, ignore_errors=True)
        raise


def _prune(dest: Path, keep: str) -> None:
    """Remove every checkpoint but `keep` (the newest verified, just committed) and stray .tmp- dirs."""
    from nsa.runfiles import CHECKPOINTS_DIR, RunDir

    for old in [*RunDir(dest).checkpoints(), *(dest / CHECKPOINTS_DIR).glob(".tmp-*")]:
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)


def _clean_tmp(dests: list[Path]) -> None:
    """Leftovers of a pull that was killed (the write lock is held: no pull is running)."""
    from nsa.runfiles import CHECKPOINTS_DIR

    for d in dests:
        for tmp in (d / CHECKPOINTS_DIR).glob(".tmp-*"):
            shutil.rmtree(tmp, ignore_errors=True)


def pull(
    rec: RunRecord, say: Callable[[str], None] = print, *, who: str = "nsa-launch pull"
) -> dict[str, Any]:
    """Bring the mirror up to the newest checkpoint that verifies on every node and here, and copy
    node 0's run files. Holds the run's write lock; re-reads the run record under it. Returns what it
    did: `checkpoint` (the mirror's now), `pulled` (None: unchanged), `host_newest` (node 0's newest
    intact checkpoint, as far as the host was asked), `corrupt` (the host's newer damaged ones).
    Raises PullFailed when the pull could not complete."""
    with run_lock(rec.run, f"{who}: pulling"):
        rec = registry.load(rec.run) or rec
        return _pull(rec, say)


def _pull(rec: RunRecord, say: Callable[[str], None]) -> dict[str, Any]:
    from nsa.runfiles import CHECKPOINTS_DIR, LATEST, RunDir, atomic_write_json

    t0 = time.monotonic()
    node = rec.nodes[0]
    dest = mirror_dir(rec.run)
    others = [(k, n) for k, n in enumerate(rec.nodes) if k]
    _clean_tmp([dest, *(node_mirror(rec.run, k) for k, _ in others)])
    have = newest_verified(rec.run)
    state: dict[str, Any] = {"host_newest": have.name if have else None}
    try:
        t = transport_for(node.host)
        rsync_pull(t, [f"{node.run_dir}/{f}" for f in FILES], dest)
        above = _step(have.name if have else None)
        for attempt in range(1, PRUNED_TRIES + 1):
            held: list[tuple[Transport, registry.NodeRecord, str]] = []  # pins the scans made
            try:
                scan = _scan_host(t, node, above)
                held += [(t, node, scan.pin)] if scan.pin else []
                pins = {0: (scan.pin, scan.nolink)}
                corrupt = [(n, why) for n, why in scan.checked if why is not None]
                ckpt = next((n for n, why in scan.checked if why is None), None)
                if ckpt:
                    state["host_newest"] = ckpt
                note = ""
                if ckpt and others:
                    names = {}
                    for k, n in others:
                        tk = transport_for(n.host)
                        sk = _scan_host(tk, n, above)
                        held += [(tk, n, sk.pin)] if sk.pin else []
                        pins[k] = (sk.pin, sk.nolink)
                        names[k] = next((x for x, w in sk.checked if w is None), None)
                    differ = {k: v for k, v in names.items() if v != ckpt}
                    if differ:  # a save between its per-node renames, or a node that lost its copy
                        note = f"; not {ckpt}: " + ", ".join(
                            f"node {k} has {v or 'no intact checkpoint newer than ' + (have.name if have else 'none')}"
                            for k, v in differ.items()
                        )
                        ckpt = None
                pulled = None
                if ckpt:
                    _bring(rec, t, ckpt, others, say, pins)
                    pulled = ckpt
                elif have is not None and others and missing_parts(rec):
                    # node 0's is here; a part was lost
                    _bring(rec, t, have.name, others, say, {}, parts_only=True)
                break
            except CheckpointPruned as e:  # unpinned: the host saved a newer one meanwhile, take that
                if attempt == PRUNED_TRIES:
                    raise
                say(f"{rec.run}: {e.message}; looking for the host's newer checkpoint")
            finally:
                for tk, n, pin in held:
                    _unpin(tk, n, pin)
    except (LaunchError, OSError) as e:
        if isinstance(e, OSError):  # this machine's side: a full disk, a permission
            e = RuntimeFailure(f"writing the mirror {dest} failed: {e}", _write_fix(e, dest))
        raise PullFailed(e, have.name if have else None, state["host_newest"]) from None
    now = newest_verified(rec.run)
    named = RunDir(dest).latest_checkpoint()
    if now is not None and (named is None or named.name != now.name):  # a pull killed before `latest`
        durable_write_text(dest / CHECKPOINTS_DIR / LATEST, now.name + "\n")
    res = {
        "run": rec.run,
        "mirror": str(dest),
        "checkpoint": now.name if now else None,
        "pulled": pulled,
        "host_newest": state["host_newest"],
        "corrupt": [n for n, _ in corrupt],
        "host_checked": [n for n, _ in scan.checked],
        "seconds": round(time.monotonic() - t0, 2),
        "time": time.time(),
    }
    atomic_write_json(dest / "mirror.json", res)
    keeps = f"the mirror keeps {res['checkpoint'] or 'no checkpoint'}"
    for n, why in corrupt:
        say(f"host's {n} of {rec.run} is corrupt ({why}); {keeps}")
    say(
        f"mirror of {rec.run}: checkpoint {res['checkpoint'] or 'none yet'}"
        + (" (new)" if pulled else " (unchanged)")
        + (f" of {len(rec.nodes)} nodes" if others else "")
        + note
        + f", files in {dest} ({res['seconds']} s)"
    )
    return res


def _write_fix(e: OSError, dest: Path) -> str:
    """What to do about a failed write to the mirror: a full disk and a read-only one need different
    things (a read-only mirror was told "free space there" until the qa walk of 2026-11-27)."""
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"make {dest} writable on this machine (or set $NSA_LAUNCH_HOME to a writable disk), then pull again"
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "free space there, then pull again"
    return "fix that on this machine, then pull again"


def _bring(
    rec: RunRecord,
    t: Transport,
    ckpt: str,
    others: list[tuple[int, registry.NodeRecord]],
    say: Callable[[str], None],
    pins: dict[int, tuple[str | None, str | None]],
    parts_only: bool = False,
) -> None:
    """Fetch `ckpt` (every node's part) into temporary dirs, then commit: the other nodes' parts first,
    node 0's last (its `latest` is the commit point), then prune. A failure leaves the mirror as it was."""
    tmps: list[tuple[Path, Path]] = []
    try:
        for k, n in others:
            d = node_mirror(rec.run, k)
            tmps.append((d, _fetch(transport_for(n.host), rec.run, k, n, ckpt, d, say, pins.get(k))))
        if not parts_only:
            dest = mirror_dir(rec.run)
            tmps.append((dest, _fetch(t, rec.run, 0, rec.nodes[0], ckpt, dest, say, pins.get(0))))
        for d, tmp in tmps:
            _commit(rec.run, d, tmp, ckpt)
    finally:
        for _, tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)  # committed ones were renamed away
    for d, _ in tmps:
        _prune(d, ckpt)


# --- restoring ----------------------------------------------------------------------------------
def push(run: str, t: Transport, run_dir: str, node: int = 0) -> str | None:
    """Put the mirror's checkpoint (node `node`'s part of it, verified with hashes first) into
    run_dir/checkpoints/ on t, with a `latest` naming it (a restore). Returns its name, or None when
    the mirror holds no checkpoint."""
    from nsa.runfiles import CHECKPOINTS_DIR, LATEST, RunDir

    ck = RunDir(mirror_dir(run)).latest_checkpoint()
    if ck is None:
        return None
    why = _part_problem(run, node, ck.name, hashes=True)
    if why is not None:
        raise RuntimeFailure(
            f"{run}: {why}",
            f"`nsa-launch pull --run {run}` while every node answers, or restore {ck.name} to node {node} by hand",
        )
    src = node_mirror(run, node) / CHECKPOINTS_DIR / ck.name
    dest = f"{run_dir}/{CHECKPOINTS_DIR}"
    t.run(f"mkdir -p {shlex.quote(dest)}", timeout=30)
    with tempfile.TemporaryDirectory(prefix="nsa-push-") as d:
        latest = Path(d) / LATEST  # names what is pushed (the part's own `latest` may be ahead)
        latest.write_text(ck.name + "\n")
        rsync_push(t, [str(src), str(latest)], dest)
    return ck.name
