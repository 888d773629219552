"""`watch`: keep a run alive from the launching machine: pull the mirror on a schedule, and replace a
lost provisioned pod, restoring the newest mirrored checkpoint there and resuming.

Owns `Watcher` (one status at a time), shared by the `watch` loop (status every `poll_s`) and the
dashboard. A watcher acts only while it holds the run's WatchLock (launcher/run/locks.py), and every
decision (pull, pod check, replacement) is taken under the run's write lock with the run record read
again: another watcher or the dashboard may have replaced the pod meanwhile, and a status fetched
for the host the run has left is fetched again for its new host. Pulls come when the status shows a
checkpoint newer than the mirror's, else every `pull_every_s` (default: half the time between two
checkpoints, from `train.save_every` and the measured step time), and once more when the run ends;
that last pull's outcome (failed, or the mirror behind the host's newest verified checkpoint) is
what `watch` exits with. On taking a run it sweeps pods recorded for the run but not in use (left by
a replacement that was killed) and offers to terminate them. Replacement itself is
launcher/recover/replace.py. A run without --provision is only reported `lost` with what to do. It must not
parse CLI arguments (launcher/cli/watch.py does) or import torch.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Callable
from typing import Any

from launcher.core.errors import LaunchError
from launcher.core.signals import hangups_as_interrupt
from launcher.recover.replace import Replacement, ReplacementFailed, pod_gone, replace_host
from launcher.run import registry
from launcher.run.locks import RunLocked, WatchLock, run_lock
from launcher.run.registry import RunRecord

__all__ = [
    "TERMINAL",
    "Replacement",
    "WatchLock",
    "Watcher",
    "lost_advice",
    "pod_gone",
    "replace_host",
    "watch",
]

TERMINAL = ("finished", "failed", "killed")
AUTO_PULL_S = (5.0, 60.0)  # the automatic pull interval's bounds (seconds)
LOCK_WAIT_S = 30.0  # a tick waits this long for another writer (a `pull`) before skipping its turn


def lost_advice(rec: RunRecord) -> str:
    """What to do about a lost run that nsa-launch cannot replace by itself."""
    from launcher.recover.mirror import mirror_dir
    from nsa.runfiles import RunDir

    m = mirror_dir(rec.run)
    # What `restart --host` moves (and refuses without): the checkpoint `latest` names, if it is there.
    newest = RunDir(m).latest_checkpoint()
    ck = newest.name if newest else None
    head = (
        f"the host of {rec.run} does not answer. If it comes back, the run goes on (its wrapper restarts "
        f"crashes there). If it is gone: "
    )
    if rec.provider:  # not replaced by watch (its reason said before this): as before, both ways named
        where = f"the mirror {m} holds {ck}" if ck else f"no checkpoint was pulled to {m}"
        return (
            head
            + f"{where}; a rented run is replaced by `nsa-launch watch` once the mirror holds its checkpoint"
        )
    if ck:
        # `restart --host` resumes from the mirror's checkpoint; a new `up` would start over: say it first.
        return (
            head
            + f"`nsa-launch restart --run {rec.run} --host NEW` resumes it on a new host from {ck} in the mirror {m}"
        )
    # `restart --host` refuses an empty mirror (nothing to move): a new `up` is all there is.
    return (
        head
        + f"no checkpoint was pulled to {m}, so it starts over: a new host and a new `nsa-launch up` (from step 0)"
    )


def _config_save_every(mirror: Any) -> int | None:
    import yaml

    try:
        cfg = yaml.safe_load((mirror / "config.yaml").read_text()) or {}
        n = int((cfg.get("train") or {}).get("save_every") or 0)
    except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError):
        return None
    return n or None


def _seconds_per_step(mirror: Any) -> float | None:
    """The median wall time of one step over the mirror's newest train records."""
    from nsa.runfiles import tail_jsonl

    recs = [r for r in tail_jsonl(mirror / "metrics.jsonl", 16384) if "loss" in r and "time" in r]
    per = sorted(
        (b["time"] - a["time"]) / (b["step"] - a["step"])
        for a, b in itertools.pairwise(recs)
        if isinstance(a.get("step"), int) and isinstance(b.get("step"), int) and b["step"] > a["step"]
    )
    return per[len(per) // 2] if per else None


def auto_pull_every(run: str) -> float:
    """Half the time between two checkpoints (train.save_every x the measured step time), within
    AUTO_PULL_S: the mirror then trails the host by at most one checkpoint. The low bound before the
    run has a measured step or a save_every."""
    from launcher.recover.mirror import mirror_dir

    m = mirror_dir(run)
    every, step_s = _config_save_every(m), _seconds_per_step(m)
    if not every or not step_s:
        return AUTO_PULL_S[0]
    return min(AUTO_PULL_S[1], max(AUTO_PULL_S[0], every * step_s / 2))


def _step_of(name: str | None) -> int | None:
    from nsa.runfiles import checkpoint_step

    return checkpoint_step(name) if name else None


class Watcher:
    """What `watch` does for one run, one status at a time, shared by `nsa-launch watch` and the
    dashboard: pull the mirror (on a new checkpoint, every `pull_every_s` or the automatic interval,
    and once more when the run ends), and replace a provisioned host lost for `lost_after_s` (or gone
    per the API). It acts only while it holds the run's WatchLock; otherwise it says once who does
    and waits to take over. `confirm(question)` answers the startup sweep's offers (None: only say)."""

    def __init__(
        self,
        run: str,
        say: Callable[[str], None],
        *,
        who: str,
        pull_every_s: float | None = None,
        lost_after_s: float = 60.0,
        max_replacements: int = 3,
        ready_timeout: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
        confirm: Callable[[str], bool] | None = None,
    ):
        rec = registry.load(run)
        if rec is None:
            raise LaunchError(f"unknown run {run!r}", "list runs with `nsa-launch runs`")
        self.rec: RunRecord = rec
        self.say = say
        self.who = who
        self.lock = WatchLock(run, who)
        self.pull_every_s, self.lost_after_s = pull_every_s, lost_after_s
        self.max_replacements, self.ready_timeout = max_replacements, ready_timeout
        self.clock = clock
        self.confirm = confirm
        self.last_pull: float | None = None
        self.mirrored: str | None = None  # the mirror's checkpoint after the last pull
        self.seen_step = -1  # the newest host step a pull took or found corrupt (not asked again)
        self.final: dict[str, Any] | None = None  # the pull after the run ended: what watch exits with
        self.lost_since: float | None = None
        self.lost_at: float | None = None  # wall time, for the recovery status
        self.replacements: list[dict[str, Any]] = []
        self.failed: list[dict[str, Any]] = []  # replacements whose new pod failed (terminated)
        self.advised = False
        self.swept = False
        self.waiting_on: str | None = None
        self.lock_busy: str | None = None

    @property
    def run(self) -> str:
        return self.rec.run

    def refresh(self) -> RunRecord:
        """The run record as the registry has it now (another watcher may have moved the run)."""
        self.rec = registry.load(self.run) or self.rec
        return self.rec

    def tick(self, st: dict[str, Any]) -> dict[str, Any]:
        """Act on one status of the run (fetch_status's dict); returns the status it acted on (fetched
        again when `st` was of a host the run has left). Raises LaunchError once the replacement
        budget is spent."""
        if not self.lock.acquire():
            holder = self.lock.holder()
            if holder != self.waiting_on:
                self.say(f"run {self.run} is watched by {holder}; this one takes over when it stops")
                self.waiting_on = holder
            return st
        if self.waiting_on is not None:
            self.say(f"run {self.run}: took over watching from {self.waiting_on}")
            self.waiting_on = None
        try:
            with run_lock(self.run, self.who, timeout=LOCK_WAIT_S):
                self.lock_busy = None
                return self._decide(st)
        except RunLocked as e:
            if e.message != self.lock_busy:
                self.say(f"{e.message}; this watcher waits")
                self.lock_busy = e.message
            return st

    def _decide(self, st: dict[str, Any]) -> dict[str, Any]:
        from launcher.recover.mirror import missing_parts
        from launcher.run.control import fetch_status

        rec = self.refresh()
        if st.get("host") is not None and st["host"] != rec.host:  # fetched for the pod the run left
            self.lost_since = None
            st = fetch_status([rec])[0]
        if not self.swept:
            try:
                self.sweep()
            except LaunchError as e:  # the API is not reachable now: the run comes first
                self.say(f"could not check the pods recorded for {self.run}: {e.message}")
        now = self.clock()
        if st["state"] != "lost":
            self.lost_since, self.lost_at, self.advised = None, None, False
            if st["state"] in TERMINAL:
                self.final = self._pull(final=True)
            elif self._pull_due(st, now):
                self._pull()
                self.last_pull = now
            return st
        self.lost_since = self.lost_since or now
        self.lost_at = self.lost_at or time.time()
        gone = pod_gone(rec) if rec.provider else None
        waited = now - self.lost_since
        # A multi-node checkpoint is split across the nodes: replaceable once the mirror holds every
        # node's part of its newest checkpoint (mirror.pull), else reported as an unprovisioned run.
        gap = missing_parts(rec) if rec.provider else None
        replaceable = bool(rec.provider) and gap is None
        if replaceable and (gone or waited >= self.lost_after_s):
            if not gone:  # a replacement costs a pod: ask once more, for the record as it is now
                again = fetch_status([rec])[0]
                if again["state"] != "lost":
                    self.lost_since = None
                    return again
            rented = len(self.replacements) + len(self.failed)
            if rented >= self.max_replacements:
                n = len(self.replacements) + 1
                failed = (
                    f" ({len(self.failed)} replacement pod{'s' if len(self.failed) != 1 else ''} failed, the last: "
                    f"{self.failed[-1]['error']})"
                    if self.failed
                    else ""
                )
                raise LaunchError(
                    f"run {self.run} lost its host {n} time{'s' if n != 1 else ''}; stopped replacing{failed}",
                    "look at the pods' history (`nsa-launch pods ls`) before renting again",
                    exit_code=1,
                )
            why = gone or f"unreachable for {waited:.0f} s ({st['error']})"
            self.say(f"run {self.run} lost its host: {why}; replacing it")
            try:
                r = replace_host(rec, self.say, self.ready_timeout, lost_at=self.lost_at)
            except ReplacementFailed as e:
                # The new pod is terminated and the record put back: a pod that fails to come up
                # (ERROR, no SSH, a resume that never booted) must not leave a lost run unwatched
                # overnight. Counted against --max-replacements; tried again after --lost-after.
                self.failed.append({"old_pod": rec.pod_id, "new_pod": e.new_pod, "error": e.message,
                                    "time": time.time()})  # fmt: skip
                more = "watch tries again" if rented + 1 < self.max_replacements else "no replacement left"
                self.say(
                    f"replacing the host of {self.run} failed (pod {rented + 1} of {self.max_replacements} "
                    f"--max-replacements): {e.message}; {more}"
                )
                self.refresh()
                self.lost_since = now
                return st
            self.replacements.append(r.__dict__)
            self.say(f"run {self.run} resumed on pod {r.new_pod} from {r.checkpoint} in {r.seconds:.0f} s")
            self.refresh()
            self.lost_since = self.lost_at = None
        elif not replaceable and not self.advised:
            why = f"\n  not replaced: {gap}" if gap else ""
            self.say(f"run {self.run} is lost: {st['error']}{why}\n  what to do: {lost_advice(rec)}")
            self.advised = True
        return st

    def _pull_due(self, st: dict[str, Any], now: float) -> bool:
        if self.last_pull is None:
            return True
        every = self.pull_every_s if self.pull_every_s is not None else auto_pull_every(self.run)
        if now - self.last_pull >= every:
            return True
        if self.pull_every_s is not None:
            return False
        # automatic: a checkpoint the status shows that the mirror does not have yet
        saved = [e.get("step") for e in st.get("events") or [] if e.get("kind") == "checkpoint"]
        newest = max((s for s in saved if isinstance(s, int)), default=None)
        return newest is not None and newest > self.seen_step

    def _pull(self, final: bool = False) -> dict[str, Any]:
        """Pull now; returns {checkpoint, host_newest, behind_steps, error} (never raises: a failed
        pull leaves the run to the next one, and a failed final pull is watch's exit code)."""
        from launcher.recover.mirror import PullFailed, pull

        try:
            res = pull(self.rec, say=self.say, who=f"{self.who}: pulling")
            out = {"checkpoint": res["checkpoint"], "host_newest": res["host_newest"], "error": None}
            seen = [_step_of(n) for n in [res["checkpoint"], *res["corrupt"]]]
            self.seen_step = max([self.seen_step, *(s for s in seen if s is not None)])
        except PullFailed as e:
            out = {"checkpoint": e.mirror_checkpoint, "host_newest": e.host_newest, "error": e.message}
        except (LaunchError, subprocess.SubprocessError, OSError) as e:
            # never a traceback that leaves the run unwatched
            msg = e.message if isinstance(e, LaunchError) else f"{type(e).__name__}: {e}"
            out = {"checkpoint": self.mirrored, "host_newest": None, "error": msg}
        self.mirrored = out["checkpoint"]
        have, host = _step_of(out["checkpoint"]), _step_of(out["host_newest"])
        out["behind_steps"] = host - (have or 0) if host is not None and (have is None or host > have) else 0
        if out["error"] is not None:
            self.say(f"{'final ' if final else ''}pull of {self.run} failed: {out['error']}")
        return out

    def sweep(self) -> list[str]:
        """Pods recorded for the run, not terminated and not the one it is on (a replacement killed
        between renting and recording them): terminated when the API says they are gone, else
        offered (`confirm`), else named with what to do. Returns the ids terminated."""
        from launcher.providers.pods import pods_of_run, terminate
        from launcher.providers.prime import GONE_STATES, PrimeClient

        self.swept = True
        stray = [p for p in pods_of_run(self.run) if p.terminated is None and p.id != self.rec.pod_id]
        if not stray:
            return []
        client, done = PrimeClient(), []
        for p in stray:
            try:
                status = client.get_pod(p.id).status
            except LaunchError as e:
                status = "TERMINATED" if "HTTP 404" in e.message else f"unknown ({e.message})"
            ask = f"pod {p.id} was rented for run {self.run} but the run is not on it (status {status}); terminate it?"
            if status in GONE_STATES or (self.confirm is not None and self.confirm(ask)):
                terminate(client, p, self.say)
                done.append(p.id)
            else:
                self.say(
                    f"pod {p.id} was rented for run {self.run} but the run is not on it (status {status}); "
                    f"it may be billing: `nsa-launch pods down {p.id}` (or `nsa-launch watch --yes`)"
                )
        return done

    def close(self) -> None:
        self.lock.release()


def mirror_problem(final: dict[str, Any] | None) -> str | None:
    """Why the mirror is not the run's newest verified checkpoint after the final pull, or None."""
    if final is None:
        return None
    behind = final.get("behind_steps") or 0
    where = f"the mirror holds {final.get('checkpoint') or 'no checkpoint'}" + (
        f", {behind} steps behind the host's newest verified {final['host_newest']}" if behind else ""
    )
    if final.get("error"):
        return f"the final pull failed ({final['error']}); {where}"
    return where if behind else None


def watch(
    run: str,
    say: Callable[[str], None],
    *,
    poll_s: float = 5.0,
    pull_every_s: float | None = None,
    lost_after_s: float = 60.0,
    max_replacements: int = 3,
    ready_timeout: float = 900.0,
    confirm: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """Watch until the run ends. Returns its last status, with `replacements` and `mirror` (the final
    pull: checkpoint, host_newest, behind_steps, error, problem)."""
    from launcher.run.control import fetch_status

    w = Watcher(
        run, say, who="nsa-launch watch", pull_every_s=pull_every_s, lost_after_s=lost_after_s,
        max_replacements=max_replacements, ready_timeout=ready_timeout, confirm=confirm,
    )  # fmt: skip
    restore = hangups_as_interrupt()
    try:
        while True:
            st = w.tick(fetch_status([w.refresh()])[0])
            # a run that ended is left once its final pull ran here (or another watcher holds it)
            if st["state"] in TERMINAL and (w.final is not None or not w.lock.held):
                st["replacements"] = w.replacements
                st["replacements_failed"] = w.failed
                st["mirror"] = {**(w.final or {}), "problem": mirror_problem(w.final)}
                return st
            time.sleep(poll_s)
    finally:
        restore()
        w.close()
