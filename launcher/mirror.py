"""The local checkpoint mirror: a run's newest INTACT checkpoint, metrics, events and log, kept on the
launching machine ($NSA_LAUNCH_HOME/mirror/<run>/), and pushed to a replacement host on restore.

Owns `pull` (node 0's run dir -> mirror, with rsync over the verified SSH, or a copy for local runs)
and `push` (mirror -> a new run dir). Only a checkpoint that passes nsa.runfiles.verify_checkpoint on
the host is pulled, and it is verified again locally before the mirror's `checkpoints/latest` names
it; older mirrored checkpoints are removed only after that. It must not start or stop runs.
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


def pull(rec: RunRecord, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Copy node 0's newest intact checkpoint and the run's files to the mirror. Returns what it did."""
    from nsa.runfiles import CHECKPOINTS_DIR, LATEST, RunDir, atomic_write_text, verify_checkpoint

    t0 = time.monotonic()
    node = rec.nodes[0]
    t = transport_for(node.host)
    dest = mirror_dir(rec.run)
    _copy(t, [f"{node.run_dir}/{f}" for f in FILES], dest)
    ckpt = _newest_intact_on_host(t, node.python, node.run_dir, node.workdir)
    local = RunDir(dest)
    have = local.latest_checkpoint()
    pulled = None
    if ckpt and not (have is not None and have.name == ckpt and verify_checkpoint(have) is None):
        # Into a .tmp- dir first, renamed into place once it verifies: the mirror never shows a
        # half-copied checkpoint (a pull cut off by a lost host) as a step dir.
        tmp = dest / CHECKPOINTS_DIR / f".tmp-{ckpt}"
        _copy(t, [f"{node.run_dir}/{CHECKPOINTS_DIR}/{ckpt}/"], tmp)
        why = verify_checkpoint(tmp)
        if why is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeFailure(
                f"the pulled checkpoint {ckpt} of {rec.run} does not verify here: {why}",
                "pull again (the host copy verified; the transfer was damaged)",
            )
        shutil.rmtree(dest / CHECKPOINTS_DIR / ckpt, ignore_errors=True)
        tmp.rename(dest / CHECKPOINTS_DIR / ckpt)
        atomic_write_text(dest / CHECKPOINTS_DIR / LATEST, ckpt + "\n")
        for old in [*local.checkpoints(), *(dest / CHECKPOINTS_DIR).glob(".tmp-*")]:
            if old.name != ckpt:
                shutil.rmtree(old, ignore_errors=True)
        pulled = ckpt
    newest = local.latest_checkpoint()
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
        + f", files in {dest} ({res['seconds']} s)"
    )
    return res


def push(run: str, t: Transport, run_dir: str) -> str | None:
    """Put the mirror's checkpoint into run_dir/checkpoints/ on t (a restore). Returns its name."""
    from nsa.runfiles import CHECKPOINTS_DIR, RunDir

    src = RunDir(mirror_dir(run)).latest_checkpoint()
    if src is None:
        return None
    dest = f"{run_dir}/{CHECKPOINTS_DIR}"
    t.run(f"mkdir -p {shlex.quote(dest)}", timeout=30)
    if isinstance(t, SSHTransport):
        from launcher.ssh.openssh import shared_options

        argv = ["rsync", "-a", "--protect-args", "-e", shlex.join(t.ssh_argv() + shared_options(t.spec))]
        argv += [str(src), str(src.parent / "latest"), f"{t.hostname}:{dest}/"]
    else:
        argv = ["rsync", "-a", str(src), str(src.parent / "latest"), f"{dest}/"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=PULL_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeFailure(
            f"pushing checkpoint {src.name} to {t.label} failed: {p.stderr.strip()[-500:]}",
            "check the new host, then retry",
        )
    return src.name
