"""Replacing a lost provisioned pod, in the order that never loses the newest checkpoint.

Owns `replace_host`: verify the mirrored checkpoint of every node (hashes) before anything is rented
or terminated; rent a pod like the old one; sync; restore the mirror's checkpoint and run files (the
metrics only up to the restored step, so metrics.jsonl never holds a step twice; node k > 0 gets only
its checkpoint part, the manifest and the configs, not node 0's log and events); start with
--resume; wait for its `boot` event (it follows the resume); and only then terminate the old pod,
unless the API already says it is gone (then it is terminated first: nothing of it bills or can be
saved). A failed replacement terminates the new pod and puts the run record back. Each phase is written
to the run's recovery status (launcher/run/recovery_status.py), which `status` shows meanwhile. Also
owns `pod_gone` (the API's word on the old pod), which the watcher asks too. The caller holds the run's
write lock (launcher/run/locks.py). It must not parse CLI arguments or import torch.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.core.errors import LaunchError, RuntimeFailure
from launcher.run import registry
from launcher.run.recovery_status import Progress
from launcher.run.registry import RunRecord


class ReplacementFailed(RuntimeFailure):
    """A replacement that rented (or tried to rent) a pod and failed; that pod is terminated and the
    run record is as it was. `new_pod`: its id, None when the API never gave one. The watcher counts
    it against --max-replacements and tries again; a failure before renting is raised as it is."""

    def __init__(self, err: LaunchError, new_pod: str | None):
        self.new_pod = new_pod
        super().__init__(err.message, err.fix)


@dataclass
class Replacement:
    old_pod: str | None
    new_pod: str
    checkpoint: str | None
    seconds: float


def pod_gone(rec: RunRecord) -> str | None:
    """Why the API says the run's pod is gone (deleted, TERMINATED, ERROR), or None."""
    if not rec.pod_id:
        return None
    from launcher.providers.prime import GONE_STATES, PrimeClient

    try:
        pod = PrimeClient().get_pod(rec.pod_id)
    except LaunchError as e:
        return f"the API no longer knows pod {rec.pod_id}" if "HTTP 404" in e.message else None
    return f"pod {rec.pod_id} is {pod.status}" if pod.status in GONE_STATES else None


# --- the replacement ----------------------------------------------------------------------------
NODE_FILES = ("manifest.json", "launch_config.yaml", "config.yaml")  # restored to nodes other than 0


def _metrics_upto(src: Path, step: int, out: Path) -> None:
    """metrics.jsonl without the records past `step`: the resumed run writes those steps again."""
    keep = []
    for line in src.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if not isinstance(r, dict) or not isinstance(r.get("step"), int) or r["step"] <= step:
            keep.append(line + "\n")
    out.write_text("".join(keep))


def replace_host(
    rec: RunRecord, say: Callable[[str], None], ready_timeout: float = 900.0, lost_at: float | None = None
) -> Replacement:
    """Rent a pod like the run's, restore the mirror there and resume; then terminate the old pod."""
    from launcher.config.profiles import load_profile
    from launcher.providers.pods import load_pod, provision, terminate
    from launcher.providers.prime import PrimeClient
    from launcher.recover.mirror import mirror_dir, missing_parts

    t0 = time.monotonic()
    progress = Progress(rec, lost_at or time.time())
    progress.set("verifying the mirror")
    renting = False
    try:
        gap = missing_parts(rec, hashes=True)  # every node's part, hashed, before anything is rented
        if gap is not None:
            raise LaunchError(
                f"cannot replace the host of {rec.run}: {gap}",
                f"restore that part by hand, or start over with `nsa-launch up` (the mirror is {mirror_dir(rec.run)})",
                exit_code=1,
            )
        profile_arg = rec.profile_file or rec.profile  # a profile given as a .yaml is read from it again
        profile = load_profile(profile_arg)  # before anything is terminated or rented
        client = PrimeClient()
        old = load_pod(rec.pod_id) if rec.pod_id else None
        if old is not None and old.terminated is None and pod_gone(rec):
            terminate(client, old, say)  # gone for sure: nothing on it to save; stop any billing now
        progress.set("provisioning")
        node0 = rec.nodes[0]
        ssh_config = node0.host.ssh_config
        renting = True  # from here a failure has cost a pod: the watcher counts it and tries again
        new, hosts = provision(
            client, profile, old.gpu_type if old else None, f"nsa-{rec.run}"[:64], rec.run, say, ready_timeout,
            ssh_config,
        )  # fmt: skip
    except BaseException as e:
        progress.clear()
        if renting and isinstance(e, LaunchError):  # provision terminated the pod it rented, named in e
            raise ReplacementFailed(e, None) from e
        raise
    progress.set("restoring", new_pod=new.id, new_host=hosts[0].label)
    try:
        _, restored = resume_from_mirror(
            rec, hosts, ssh_config, say, ready_timeout, where=f"pod {new.id}", pod_id=new.id,
            event={"old_pod": rec.pod_id, "new_pod": new.id},
            python=node0.python if node0.python.startswith("/") else None, workdir=rec.workdir_arg,
            accept_new_host_key=True, resuming=lambda: progress.set("resuming"),
        )  # fmt: skip
    except BaseException as e:
        say(f"replacing the host failed; terminating pod {new.id} so nothing is left billing")
        try:
            terminate(client, new, say)
        finally:
            registry.save(rec)  # the run is where it was: the old pod (kept: it may come back)
            progress.clear()
        if isinstance(e, LaunchError):
            raise ReplacementFailed(e, new.id) from e
        if isinstance(e, (OSError, subprocess.SubprocessError)):  # a transfer, a file of the mirror
            raise ReplacementFailed(RuntimeFailure(f"{type(e).__name__}: {e}", "see above"), new.id) from e
        raise
    old = load_pod(rec.pod_id) if rec.pod_id else None
    try:
        if old is not None and old.terminated is None:
            terminate(client, old, say)  # the new pod runs from the mirror: the old one may go now
    finally:
        progress.clear()
    return Replacement(rec.pod_id, new.id, restored, time.monotonic() - t0)


def resume_from_mirror(
    rec: RunRecord,
    hosts: list[Any],
    ssh_config: str | None,
    say: Callable[[str], None],
    ready_timeout: float,
    *,
    where: str,
    event: dict[str, Any],
    pod_id: str | None = None,
    python: str | None = None,
    workdir: str | None = None,
    accept_new_host_key: bool = False,
    resuming: Callable[[], None] = lambda: None,
) -> tuple[RunRecord, str | None]:
    """Restore the mirror to `hosts` (node k gets its part of the checkpoint), start the run there with
    --resume and the inputs it was launched with, record it there (`pod_id`), and wait for its `boot`
    event. Shared by a pod replacement and `restart --host` (a run moved off a lost plain SSH host).
    `event`: the `host_replaced` event's detail besides `old_host`, `host` and `nodes`. Returns the
    new record and the restored checkpoint; raises when the run did not resume (`where`: the pod or
    host, for the message). The mirror was verified by the caller."""
    from launcher.launch.execute import execute, wait_first_heartbeat
    from launcher.launch.plan import UpOptions, plan_run, with_recorded_inputs
    from launcher.recover.mirror import FILES, mirror_dir, push
    from launcher.recover.transfer import rsync_push
    from launcher.run.control import resume_report
    from nsa.runfiles import RunDir, append_jsonl, checkpoint_step

    ck = RunDir(mirror_dir(rec.run)).latest_checkpoint()
    upto = (checkpoint_step(ck.name) or 0) if ck else 0
    opts = UpOptions(
        profile=rec.profile_file or rec.profile,  # a profile given as a .yaml is read from it again
        hosts=[h.target for h in hosts],
        ssh_config=ssh_config,
        name=rec.run,
        resume=True,
        python=python,
        workdir=workdir,
        accept_new_host_key=accept_new_host_key,
    )
    opts, _ = with_recorded_inputs(opts, rec)  # the run's config, --set, --env, --secret, as `up --resume`
    plan = plan_run(opts)
    plan.hosts = hosts
    man = json.loads((mirror_dir(rec.run) / "manifest.json").read_text())
    plan.opts.max_restarts = man.get("max_restarts")
    restored: dict[str, Any] = {}
    index = iter(range(len(hosts)))  # execute restores node 0, 1, ... in order: node k gets part k

    def restore(t: Any, node: Any) -> None:
        src, k = mirror_dir(rec.run), next(index)
        if k == 0:
            append_jsonl(
                src / "events.jsonl",
                {"kind": "host_replaced", "time": time.time(), "step": None, "rank": None,
                 "detail": {**event, "old_host": rec.host, "host": node.label, "nodes": len(hosts)}},
            )  # fmt: skip
        t.run(f"mkdir -p {_q(node.run_dir)}", timeout=30)
        with tempfile.TemporaryDirectory(prefix="nsa-restore-") as d:
            # The mirror's run files are node 0's (rank 0 writes the metrics and events; train.log
            # is its log): node k > 0 gets only what resuming needs, its manifest (made its own by
            # the start) and the configs, so its log and restart history start clean, as on a launch.
            names = FILES if k == 0 else NODE_FILES
            files = [str(src / f) for f in names if (src / f).exists() and f != "metrics.jsonl"]
            if k == 0 and (src / "metrics.jsonl").exists():
                _metrics_upto(src / "metrics.jsonl", upto, Path(d) / "metrics.jsonl")
                files.append(str(Path(d) / "metrics.jsonl"))
            rsync_push(t, files, node.run_dir)
        restored["checkpoint"] = push(rec.run, t, node.run_dir, k)
        say(f"restored {restored['checkpoint'] or 'no checkpoint (starts from step 0)'} to {node.label}")

    since = time.time() - 2.0  # the new run's own events are newer (small clock skew allowed)
    new_rec, _ = execute(plan, say=say, before_start=restore)
    new_rec.provider, new_rec.pod_id, new_rec.created = rec.provider, pod_id, rec.created
    registry.save(new_rec)
    resuming()
    wait_first_heartbeat(new_rec)
    # resumed = its `boot` event, written after the checkpoint loaded (the first heartbeat is older)
    ok, line = resume_report(new_rec, since, timeout=ready_timeout)
    if not ok:
        raise RuntimeFailure(f"the run did not resume on {where}: {line}", "see `nsa-launch logs`")
    say(f"run {rec.run} {line} on {where}")
    return new_rec, restored.get("checkpoint")


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)
