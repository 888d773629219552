"""The local checkpoint mirror: a run's newest INTACT checkpoint, metrics, events and log, kept on the
launching machine ($NSA_LAUNCH_HOME/mirror/<run>/), and pushed to a replacement host on restore.

Owns `pull` (node 0's run dir -> mirror, with rsync over the verified SSH, or a copy for local runs)
and `push` (mirror -> a new run dir). Only a checkpoint that passes nsa.runfiles.verify_checkpoint on
the host is pulled, and it is verified again locally before the mirror's `checkpoints/latest` names
it; older mirrored checkpoints are removed only after that. A multi-node run's checkpoint is split:
node 0 holds the weights and optimizer, every other node k its ranks' data state and RNG (a few kB)
in its own run dir; those parts go to `nodes/<k>/checkpoints/` and are pulled only when every node's
newest intact checkpoint is the same step, before node 0's `latest` names it (the commit point).
It must not start or stop runs.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher import registry
from launcher.errors import RuntimeFailure
from launcher.registry import RunRecord
from launcher.remote import transport_for
from launcher.ssh.transport import SSHTransport, Transport

# The run-dir files worth keeping off the pod besides the checkpoint (small, append-only or whole).
FILES = ("manifest.json", "launch_config.yaml", "config.yaml", "metrics.jsonl", "events.jsonl", "train.log")
PULL_TIMEOUT_S = 1800.0


def mirror_dir(run: str) -> Path:
    return registry.home() / "mirror" / run


def node_mirror(run: str, node: int) -> Path:
    """Where node `node`'s part of a multi-node checkpoint is mirrored (node 0's is the mirror itself)."""
    return mirror_dir(run) if node == 0 else mirror_dir(run) / "nodes" / str(node)


def _part_problem(run: str, node: int, ckpt: str) -> str | None:
    """Why node `node`'s part of the mirrored checkpoint `ckpt` cannot be restored, or None."""
    from nsa.runfiles import CHECKPOINTS_DIR, verify_checkpoint

    why = verify_checkpoint(node_mirror(run, node) / CHECKPOINTS_DIR / ckpt)
    return (
        None if why is None else f"the mirror holds node 0's {ckpt} but not node {node}'s part of it ({why})"
    )


def missing_parts(rec: RunRecord) -> str | None:
    """Why the mirror cannot restore every node of the run (a node's part of its checkpoint is missing
    or damaged), or None: it can (or it holds no checkpoint at all, and a restore starts at step 0)."""
    from nsa.runfiles import RunDir

    ck = RunDir(mirror_dir(rec.run)).latest_checkpoint()
    if ck is None:
        return None
    return next((p for k in range(1, len(rec.nodes)) if (p := _part_problem(rec.run, k, ck.name))), None)


def _newest_intact_on_host(t: Transport, python: str, run_dir: str, workdir: str) -> str | None:
    code = (
        "import sys; from nsa.runfiles import RunDir; "
        "p = RunDir(sys.argv[1]).newest_intact_checkpoint(); print(p.name if p else '')"
    )
    cmd = f"cd {shlex.quote(workdir)} && {shlex.quote(python)} -c {shlex.quote(code)} {shlex.quote(run_dir)}"
    out = t.run(cmd, timeout=300).stdout.strip().splitlines()
    return out[-1] if out and out[-1] else None


def _copy(t: Transport, remote: list[str], dest: Path) -> None:
    """rsync remote paths (absolute, on t; local paths for local runs) into dest/, keeping the names."""
    dest.mkdir(parents=True, exist_ok=True)
    if isinstance(t, SSHTransport):
        from launcher.ssh.openssh import shared_options

        argv = ["rsync", "-a", "--protect-args", "--ignore-missing-args"]
        argv += ["-e", shlex.join(t.ssh_argv() + shared_options(t.spec))]
        argv += [f"{t.hostname}:{p}" for p in remote] + [f"{dest}/"]
    else:
        argv = ["rsync", "-a", "--ignore-missing-args", *remote, f"{dest}/"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=PULL_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeFailure(
            f"pulling {', '.join(Path(r).name for r in remote)} from {t.label} failed (rsync exit "
            f"{p.returncode}): {p.stderr.strip()[-500:]}",
            "check the host is reachable (`nsa-launch status`), then `nsa-launch pull` again",
        )


def _fetch_checkpoint(t: Transport, run_dir: str, ckpt: str, dest: Path) -> Path:
    """Copy run_dir/checkpoints/<ckpt> from t into dest/checkpoints/.tmp-<ckpt> and verify it there.
    A half-copied checkpoint (a pull cut off by a lost host) never shows as a step dir."""
    from nsa.runfiles import CHECKPOINTS_DIR, verify_checkpoint

    tmp = dest / CHECKPOINTS_DIR / f".tmp-{ckpt}"
    _copy(t, [f"{run_dir}/{CHECKPOINTS_DIR}/{ckpt}/"], tmp)
    why = verify_checkpoint(tmp)
    if why is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeFailure(
            f"the pulled checkpoint {ckpt} from {t.label} does not verify here: {why}",
            "pull again (the host copy verified; the transfer was damaged)",
        )
    return tmp


def _commit(dest: Path, tmp: Path, ckpt: str) -> None:
    """Rename a verified .tmp- copy into place and name it in `latest`."""
    from nsa.runfiles import CHECKPOINTS_DIR, LATEST, atomic_write_text

    shutil.rmtree(dest / CHECKPOINTS_DIR / ckpt, ignore_errors=True)
    tmp.rename(dest / CHECKPOINTS_DIR / ckpt)
    atomic_write_text(dest / CHECKPOINTS_DIR / LATEST, ckpt + "\n")


def _prune(dest: Path, keep: str) -> None:
    from nsa.runfiles import CHECKPOINTS_DIR, RunDir

    for old in [*RunDir(dest).checkpoints(), *(dest / CHECKPOINTS_DIR).glob(".tmp-*")]:
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)


def pull(rec: RunRecord, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Copy the newest intact checkpoint (every node's part) and node 0's run files to the mirror.
    Returns what it did."""
    from nsa.runfiles import RunDir, verify_checkpoint

    t0 = time.monotonic()
    node = rec.nodes[0]
    t = transport_for(node.host)
    dest = mirror_dir(rec.run)
    _copy(t, [f"{node.run_dir}/{f}" for f in FILES], dest)
    ckpt = _newest_intact_on_host(t, node.python, node.run_dir, node.workdir)
    others = [(k, n, transport_for(n.host)) for k, n in enumerate(rec.nodes) if k]
    note = ""
    if ckpt and others:
        names = {k: _newest_intact_on_host(tk, n.python, n.run_dir, n.workdir) for k, n, tk in others}
        differ = {k: v for k, v in names.items() if v != ckpt}
        if differ:  # a save between its per-node renames, or a node that lost its copy
            note = f"; not {ckpt}: " + ", ".join(
                f"node {k} has {v or 'none intact'}" for k, v in differ.items()
            )
            ckpt = None
    have = RunDir(dest).latest_checkpoint()
    have_ok = ckpt is not None and have is not None and have.name == ckpt and verify_checkpoint(have) is None
    pulled = None
    if ckpt and not (have_ok and missing_parts(rec) is None):
        main = None if have_ok else _fetch_checkpoint(t, node.run_dir, ckpt, dest)
        parts = [(node_mirror(rec.run, k), _fetch_checkpoint(tk, n.run_dir, ckpt, node_mirror(rec.run, k)))
                 for k, n, tk in others]  # fmt: skip
        for d, tmp in parts:  # the other nodes' parts first: node 0's `latest` is the commit point
            _commit(d, tmp, ckpt)
        if main is not None:
            _commit(dest, main, ckpt)
        for d in [dest, *(d for d, _ in parts)]:
            _prune(d, ckpt)
        pulled = ckpt
    newest = RunDir(dest).latest_checkpoint()
    res = {
        "run": rec.run,
        "mirror": str(dest),
        "checkpoint": newest.name if newest else None,
        "pulled": pulled,
        "seconds": round(time.monotonic() - t0, 2),
        "time": time.time(),
    }
    (dest / "mirror.json").write_text(json.dumps(res))
    say(
        f"mirror of {rec.run}: checkpoint {res['checkpoint'] or 'none yet'}"
        + (" (new)" if pulled else " (unchanged)")
        + (f" of {len(rec.nodes)} nodes" if others else "")
        + note
        + f", files in {dest} ({res['seconds']} s)"
    )
    return res


def push(run: str, t: Transport, run_dir: str, node: int = 0) -> str | None:
    """Put the mirror's checkpoint (node `node`'s part of it) into run_dir/checkpoints/ on t (a
    restore). Returns its name, or None when the mirror holds no checkpoint."""
    from nsa.runfiles import CHECKPOINTS_DIR, LATEST, RunDir

    ck = RunDir(mirror_dir(run)).latest_checkpoint()
    if ck is None:
        return None
    src = node_mirror(run, node) / CHECKPOINTS_DIR / ck.name
    why = _part_problem(run, node, ck.name) if node else None
    if why is not None:
        raise RuntimeFailure(
            f"{run}: {why}",
            f"`nsa-launch pull --run {run}` while every node answers, or restore {ck.name} to node {node} by hand",
        )
    dest = f"{run_dir}/{CHECKPOINTS_DIR}"
    t.run(f"mkdir -p {shlex.quote(dest)}", timeout=30)
    if isinstance(t, SSHTransport):
        from launcher.ssh.openssh import shared_options

        argv = ["rsync", "-a", "--protect-args", "-e", shlex.join(t.ssh_argv() + shared_options(t.spec))]
        argv += [str(src), str(src.parent / LATEST), f"{t.hostname}:{dest}/"]
    else:
        argv = ["rsync", "-a", str(src), str(src.parent / LATEST), f"{dest}/"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=PULL_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeFailure(
            f"pushing checkpoint {src.name} to {t.label} failed: {p.stderr.strip()[-500:]}",
            "check the new host, then retry",
        )
    return src.name
