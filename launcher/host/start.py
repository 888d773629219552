"""`start`: create (or, on resume, reopen) the run dir, write its files and start its tmux session.

Owns refusing a name already in use on the host (a tmux session or a non-empty run dir), the
manifest's `started_at` / `restarts` (and, on a resume that brings a manifest, the node's own host,
rank and command), and clearing the previous end markers on resume. It must not build the wrapper's
text (wrapper.py) or talk to tmux directly (tmux.py).
"""

from __future__ import annotations

import shlex
import time
from typing import Any

from launcher.host import tmux
from launcher.host.wrapper import WRAPPER, wrapper_script, write_secrets
from nsa.runfiles import LATEST, RunDir, atomic_write_json, atomic_write_text, read_json, verify_checkpoint

NODE_KEYS = ("host", "node_rank", "command")  # taken from the request's manifest on a resume


def no_intact_checkpoint(rd: RunDir) -> str | None:
    """'no intact checkpoint; N found, each failed: ...' when the run dir holds checkpoints and none
    verifies (the trainer would stop with exit 2 after `up` had already said "running"); else None."""
    found = rd.checkpoints()
    reasons = [(p.name, verify_checkpoint(p)) for p in found]
    if not found or any(r is None for _, r in reasons):
        return None
    each = "; ".join(f"{name}: {r if len(r) <= 200 else r[:197] + '...'}" for name, r in reasons[:5])
    more = f"; and {len(found) - 5} more" if len(found) > 5 else ""
    return f"no intact checkpoint in {rd.checkpoints_dir}; {len(found)} found, each failed: {each}{more}"


def _move_aside(rd: RunDir) -> None:
    """--from-scratch: every step-* dir leaves the step-* namespace as aside-<time>-step-* (never
    deleted: a person may still recover one), so a later resume takes the new start's checkpoints."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for p in rd.checkpoints():
        p.rename(p.with_name(f"aside-{stamp}-{p.name}"))
    (rd.checkpoints_dir / LATEST).unlink(missing_ok=True)


def cmd_start(req: dict[str, Any]) -> dict[str, Any]:
    """Create the run dir (or reuse it with resume), write manifest + wrapper, start tmux."""
    run, rd = req["run"], RunDir(req["run_dir"])
    sname = tmux.session_name(run, int(req.get("node", 0)))
    if tmux.has_session(req, sname):
        return {
            "ok": False,
            "error": f"tmux session {sname} already exists on this host",
            "fix": "pick another --name, or `nsa-launch kill --run " + run + "` first",
        }
    resume = bool(req.get("resume"))
    if not resume and rd.root.exists() and any(rd.root.iterdir()):
        return {
            "ok": False,
            "error": f"run dir {rd.root} already exists on this host",
            "fix": "pick another --name, or use `nsa-launch restart --run " + run + "`",
        }
    if resume and not rd.manifest.exists():
        return {
            "ok": False,
            "error": f"run dir {rd.root} has no manifest.json: nothing to resume",
            "fix": "start a new run with `nsa-launch up`",
        }
    scratch = resume and bool(req.get("from_scratch"))
    if resume and not scratch:
        problem = no_intact_checkpoint(rd)
        if problem:
            return {
                "ok": False,
                "error": problem,
                "fix": "restore an intact step-* dir (`nsa-launch pull` keeps a copy), or start the run over "
                f"from step 0 in its run dir: nsa-launch up --resume --from-scratch --name {run}",
            }
    if scratch:
        _move_aside(rd)
    rd.root.mkdir(parents=True, exist_ok=True)
    for name, text in (req.get("files") or {}).items():
        atomic_write_text(rd.root / name, text)
    if resume:
        manifest = read_json(rd.manifest) or {}
        # The run's history stays; the node's own facts are this start's: a replacement pod restores
        # node 0's mirrored manifest to every node, with another host and torchrun command.
        new = req.get("manifest") or {}
        manifest.update({k: new[k] for k in NODE_KEYS if k in new})
        manifest.setdefault("restarts", []).append({"time": time.time()})
        for p in (rd.exit_code_file, rd.killed_file, rd.stop_requested_file):
            p.unlink(missing_ok=True)
    else:
        manifest = dict(req.get("manifest") or {})
    if not resume or not (rd.root / WRAPPER).exists():
        # A resume on a replacement host has the mirrored run dir but no wrapper of its own yet.
        atomic_write_text(rd.root / WRAPPER, wrapper_script(req))
    manifest["started_at"] = time.time()
    atomic_write_json(rd.manifest, manifest)
    if req.get("secrets"):
        write_secrets(rd.root, req["secrets"])
    argv = ["bash", str(rd.root / WRAPPER)] + (["--resume"] if resume and not scratch else [])
    try:
        pid = tmux.start_session(req, sname, "exec " + shlex.join(argv), req["workdir"])
    except tmux.TmuxError as e:  # e.g. a concurrent start created the session first
        return {
            "ok": False,
            "error": f"cannot start tmux session {sname}: {e}",
            "fix": f"nsa-launch status --run {run}",
        }
    return {"ok": True, "session": sname, "pane_pid": pid, "time": time.time()}
