"""`watch`: keep a run alive from the launching machine: pull the mirror on a schedule, and replace a
lost provisioned pod, restoring the newest mirrored checkpoint there and resuming.

Owns `Watcher` (one status at a time: `mirror.pull` every `pull_every_s`, a host that is gone per
the Prime API or unreachable for `lost_after_s` counts as lost), shared by the `watch` loop (status
every `poll_s`) and the dashboard; `WatchLock`, so that one watcher acts on a run at a time; and
`replace_host` (terminate the old pod, rent one like it, sync, push the mirror into the run dir,
start with --resume, wait for the first heartbeat, record a `host_replaced` event). A run without --provision is only reported `lost`
with what to do. It must not parse CLI arguments (launcher/cli/watch.py does) or import torch.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher import registry
from launcher.errors import LaunchError
from launcher.registry import RunRecord

TERMINAL = ("finished", "failed", "killed")


def lost_advice(rec: RunRecord) -> str:
    """What to do about a lost run that nsa-launch cannot replace by itself."""
    from launcher.mirror import mirror_dir

    m = mirror_dir(rec.run)
    ck = None
    latest = m / "checkpoints" / "latest"
    if latest.is_file():
        ck = latest.read_text().strip()
    where = f"the mirror {m} holds {ck}" if ck else f"no checkpoint was pulled to {m}"
    return (
        f"the host of {rec.run} does not answer. If it comes back, the run goes on (its wrapper restarts "
        f"crashes there). If it is gone: {where}; runs started with `nsa-launch up --provision prime` are "
        "replaced by `nsa-launch watch`, others need a new host and a new `nsa-launch up`"
    )


@dataclass
class Replacement:
    old_pod: str | None
    new_pod: str
    checkpoint: str | None
    seconds: float


def replace_host(rec: RunRecord, say: Callable[[str], None], ready_timeout: float = 900.0) -> Replacement:
    """Terminate the run's pod, rent a new one of the same GPU type, restore the mirror, resume."""
    from launcher.launch.execute import execute, wait_first_heartbeat
    from launcher.launch.plan import UpOptions, plan_run
    from launcher.mirror import mirror_dir, missing_parts, push
    from launcher.profiles import load_profile
    from launcher.providers.pods import load_pod, provision, terminate
    from launcher.providers.prime import PrimeClient
    from nsa.runfiles import append_jsonl

    t0 = time.monotonic()
    gap = missing_parts(rec)
    if gap is not None:  # checked before anything is terminated or rented
        raise LaunchError(
            f"cannot replace the host of {rec.run}: {gap}",
            f"restore that part by hand, or start over with `nsa-launch up` (the mirror is {mirror_dir(rec.run)})",
            exit_code=1,
        )
    profile_arg = rec.profile_file or rec.profile  # a profile given as a .yaml is read from it again
    profile = load_profile(profile_arg)  # before anything is terminated or rented
    client = PrimeClient()
    old = load_pod(rec.pod_id) if rec.pod_id else None
    if old is not None and old.terminated is None:
        terminate(client, old, say)  # a lost pod may still bill
    node0 = rec.nodes[0]
    ssh_config = node0.host.ssh_config
    new, hosts = provision(
        client, profile, old.gpu_type if old else None, f"nsa-{rec.run}"[:64], rec.run, say, ready_timeout,
        ssh_config,
    )  # fmt: skip
    try:
        sets = [o for o in rec.overrides if o not in profile.overrides]
        opts = UpOptions(
            profile=profile_arg,
            hosts=[h.target for h in hosts],
            ssh_config=ssh_config,
            config=rec.config,
            sets=sets,
            env=[f"{k}={v}" for k, v in rec.env.items()],
            secrets=list(rec.secrets),
            name=rec.run,
            resume=True,
            python=node0.python if node0.python.startswith("/") else None,
            workdir=rec.workdir_arg,
            accept_new_host_key=True,
        )
        plan = plan_run(opts)
        plan.hosts = hosts
        man = json.loads((mirror_dir(rec.run) / "manifest.json").read_text())
        plan.opts.max_restarts = man.get("max_restarts")
        restored: dict[str, Any] = {}
        index = iter(range(len(hosts)))  # execute restores node 0, 1, ... in order: node k gets part k

        def restore(t: Any, node: Any) -> None:
            from launcher.mirror import FILES

            src, k = mirror_dir(rec.run), next(index)
            if k == 0:
                append_jsonl(
                    src / "events.jsonl",
                    {"kind": "host_replaced", "time": time.time(), "step": None, "rank": None,
                     "detail": {"old_pod": rec.pod_id, "new_pod": new.id, "host": node.label,
                                "nodes": len(hosts)}},
                )  # fmt: skip
            t.run(f"mkdir -p {_q(node.run_dir)}", timeout=30)
            _push_files(t, [str(src / f) for f in FILES if (src / f).exists()], node.run_dir)
            restored["checkpoint"] = push(rec.run, t, node.run_dir, k)
            say(f"restored {restored['checkpoint'] or 'no checkpoint (starts from step 0)'} to {node.label}")

        new_rec, _ = execute(plan, say=say, before_start=restore)
        new_rec.provider, new_rec.pod_id, new_rec.created = rec.provider, new.id, rec.created
        registry.save(new_rec)
        wait_first_heartbeat(new_rec)
    except BaseException:
        say(f"replacing the host failed; terminating pod {new.id} so nothing is left billing")
        terminate(client, new, say)
        raise
    return Replacement(rec.pod_id, new.id, restored.get("checkpoint"), time.monotonic() - t0)


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _push_files(t: Any, files: list[str], dest: str) -> None:
    import subprocess

    from launcher.errors import RuntimeFailure
    from launcher.ssh.openssh import shared_options
    from launcher.ssh.transport import SSHTransport

    if isinstance(t, SSHTransport):
        argv = [
            "rsync",
            "-a",
            "--protect-args",
            "-e",
            " ".join(map(_q, t.ssh_argv() + shared_options(t.spec))),
        ]
        argv += [*files, f"{t.hostname}:{dest}/"]
    else:
        argv = ["rsync", "-a", *files, f"{dest}/"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeFailure(f"pushing the mirror to {t.label} failed: {p.stderr.strip()[-500:]}", "retry")


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


class WatchLock:
    """One watcher per run: an flock on $NSA_LAUNCH_HOME/watch/<run>.lock, which the kernel releases
    when its process dies (no stale lock after a crash or a closed laptop lid). The file says who
    holds it. Two locks on one run exclude each other within one process too (flock is per open)."""

    def __init__(self, run: str, who: str):
        self.path = registry.home() / "watch" / f"{run}.lock"
        self.who = who
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} ({self.who})".encode())
        self._fd = fd
        return True

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it (`pid N (nsa-launch watch)`)."""
        try:
            return self.path.read_text().strip() or "another process"
        except OSError:
            return "another process"

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


class Watcher:
    """What `watch` does for one run, one status at a time, shared by `nsa-launch watch` and the
    dashboard: pull the mirror every `pull_every_s` (and once more when the run ends), and replace a
    provisioned host lost for `lost_after_s` (or gone per the API). It acts only while it holds the
    run's WatchLock; otherwise it says once who does and waits to take over."""

    def __init__(
        self,
        run: str,
        say: Callable[[str], None],
        *,
        who: str,
        pull_every_s: float = 60.0,
        lost_after_s: float = 60.0,
        max_replacements: int = 3,
        ready_timeout: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        rec = registry.load(run)
        if rec is None:
            raise LaunchError(f"unknown run {run!r}", "list runs with `nsa-launch runs`")
        self.rec: RunRecord = rec
        self.say = say
        self.lock = WatchLock(run, who)
        self.pull_every_s, self.lost_after_s = pull_every_s, lost_after_s
        self.max_replacements, self.ready_timeout = max_replacements, ready_timeout
        self.clock = clock
        self.last_pull: float | None = None
        self.lost_since: float | None = None
        self.replacements: list[dict[str, Any]] = []
        self.advised = False
        self.waiting_on: str | None = None

    @property
    def run(self) -> str:
        return self.rec.run

    def tick(self, st: dict[str, Any]) -> None:
        """Act on one fresh status of the run (fetch_status's dict). Raises LaunchError once the
        replacement budget is spent."""
        from launcher.mirror import pull

        if not self.lock.acquire():
            holder = self.lock.holder()
            if holder != self.waiting_on:
                self.say(f"run {self.run} is watched by {holder}; this one takes over when it stops")
                self.waiting_on = holder
            return
        if self.waiting_on is not None:
            self.say(f"run {self.run}: took over watching from {self.waiting_on}")
            self.waiting_on = None
        now = self.clock()
        if st["state"] != "lost":
            self.lost_since, self.advised = None, False
            due = self.last_pull is None or now - self.last_pull >= self.pull_every_s
            if due or st["state"] in TERMINAL:
                try:
                    pull(self.rec, say=self.say)
                except LaunchError as e:
                    self.say(f"pull of {self.run} failed: {e.message}")
                self.last_pull = now
            return
        self.lost_since = self.lost_since or now
        gone = pod_gone(self.rec) if self.rec.provider else None
        waited = now - self.lost_since
        # A multi-node checkpoint is split across the nodes: replaceable once the mirror holds every
        # node's part of its newest checkpoint (mirror.pull), else reported as an unprovisioned run.
        from launcher.mirror import missing_parts

        gap = missing_parts(self.rec) if self.rec.provider else None
        replaceable = bool(self.rec.provider) and gap is None
        if replaceable and (gone or waited >= self.lost_after_s):
            if len(self.replacements) >= self.max_replacements:
                n = len(self.replacements) + 1
                raise LaunchError(
                    f"run {self.run} lost its host {n} time{'s' if n != 1 else ''}; stopped replacing",
                    "look at the pods' history (`nsa-launch pods ls`) before renting again",
                    exit_code=1,
                )
            why = gone or f"unreachable for {waited:.0f} s ({st['error']})"
            self.say(f"run {self.run} lost its host: {why}; replacing it")
            r = replace_host(self.rec, self.say, self.ready_timeout)
            self.replacements.append(r.__dict__)
            self.say(f"run {self.run} resumed on pod {r.new_pod} from {r.checkpoint} in {r.seconds:.0f} s")
            self.rec = registry.load(self.run) or self.rec
            self.lost_since = None
        elif not replaceable and not self.advised:
            why = f"\n  not replaced: {gap}" if gap else ""
            self.say(f"run {self.run} is lost: {st['error']}{why}\n  what to do: {lost_advice(self.rec)}")
            self.advised = True

    def close(self) -> None:
        self.lock.release()


def watch(
    run: str,
    say: Callable[[str], None],
    *,
    poll_s: float = 5.0,
    pull_every_s: float = 60.0,
    lost_after_s: float = 60.0,
    max_replacements: int = 3,
    ready_timeout: float = 900.0,
) -> dict[str, Any]:
    """Watch until the run ends. Returns its last status (with `replacements`)."""
    from launcher.control import fetch_status

    w = Watcher(
        run, say, who="nsa-launch watch", pull_every_s=pull_every_s, lost_after_s=lost_after_s,
        max_replacements=max_replacements, ready_timeout=ready_timeout,
    )  # fmt: skip
    try:
        while True:
            st = fetch_status([w.rec])[0]
            w.tick(st)
            if st["state"] in TERMINAL:
                st["replacements"] = w.replacements
                return st
            time.sleep(poll_s)
    finally:
        w.close()
