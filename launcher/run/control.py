"""Watching and steering runs that are already started: status, logs, kill, restart, tunnel, and the
wait for a started run's first heartbeat (`up` and `restart`).

Owns the launcher side of those operations for runs in the local registry: it fans each out over
the run's node hosts (one agent exec per host for status), merges the per-node answers into one
status dict per run, and turns an unreachable host into state "lost" with an error string, never an
exception. It must not touch tmux or processes itself (the agent does) and never imports torch.
What only logs and tunnel need is imported there: a cold `nsa-launch status` imports this module.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from launcher.core.errors import LaunchError, RuntimeFailure
from launcher.run import registry
from launcher.run.registry import NodeRecord, RunRecord
from launcher.ssh.remote import agent_call, agent_stream, reader_for, transport_for

STATUS_TIMEOUT_S = 30.0


def resolve_run(run: str | None) -> RunRecord:
    """The named run, or the most recent one; LaunchError (exit 2) when there is none."""
    if run is None:
        runs = registry.all_runs()
        if not runs:
            raise LaunchError(
                f"no runs launched from this machine yet (registry: {registry.runs_dir()})",
                "start one with `nsa-launch up`",
            )
        return runs[0]
    rec = registry.load(run)
    if rec is None:
        import difflib

        names = [r.run for r in registry.all_runs()]
        near = difflib.get_close_matches(run, names, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise LaunchError(
            f"unknown run {run!r} (registry: {registry.runs_dir()})",
            f"{hint}list runs with `nsa-launch runs`",
        )
    return rec


SEEN_EVERY_S = 30.0  # the last-contact record: rewritten at most this often, or on a new step or state


def _seen_file(run: str) -> Any:
    return registry.home() / "seen" / f"{run}.json"


def _remember_contact(st: dict[str, Any]) -> None:
    """Keep the last answer from a run's host (time, step, loss, state), so a `lost` status can say
    when the host last answered and where the run was then."""
    import json

    path = _seen_file(str(st["run"]))
    now = float(st.get("time") or time.time())
    try:
        old = json.loads(path.read_text())
        same = old.get("step") == st.get("step") and old.get("state") == st.get("state")
        if same and now - float(old.get("time", 0)) < SEEN_EVERY_S:  # a run ending at its last step is news
            return
    except (OSError, ValueError, TypeError):
        pass
    _write_seen(str(st["run"]), {k: st.get(k) for k in ("time", "step", "loss", "state")} | {"time": now})


def _write_seen(run: str, seen: dict[str, Any]) -> None:
    """The run's last known contact, written whole (nsa.runfiles.atomic_write_json); a read-only home
    must not fail a status or a kill that worked."""
    from nsa.runfiles import atomic_write_json

    with contextlib.suppress(OSError):
        atomic_write_json(_seen_file(run), seen)


def last_contact(run: str) -> dict[str, Any]:
    """What `_remember_contact` kept for the run ({} when its host never answered from here)."""
    import json

    try:
        return dict(json.loads(_seen_file(run).read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def _lost(rec: RunRecord, error: str) -> dict[str, Any]:
    seen = last_contact(rec.run)
    return {
        "last_contact": seen.get("time"),  # when its host last answered (epoch s), and then:
        "last_step": seen.get("step"),
        "last_state": seen.get("state"),
        "run": rec.run,
        "host": rec.host,
        "profile": rec.profile,
        "state": "lost",
        "step": None,
        "total_steps": rec.total_steps,
        "loss": None,
        "tokens_per_s": None,
        "eta_s": None,
        "elapsed_s": None,
        "heartbeat_age_s": {},
        "gpus": [],
        "exit_code": None,
        "pids": [],
        "events": [],
        "restarts": None,
        "time": time.time(),
        "error": error,
        "run_dir": rec.run_dir,
    }


def fetch_status(records: list[RunRecord]) -> list[dict[str, Any]]:
    """One status dict per record, in order. One agent exec per (host, tmux socket)."""
    groups: dict[tuple[Any, ...], list[tuple[int, int, NodeRecord, RunRecord]]] = {}
    for ri, rec in enumerate(records):
        for ni, node in enumerate(rec.nodes):
            key = (tuple(sorted(node.host.to_dict().items())), node.workdir, node.python, rec.tmux_socket)
            groups.setdefault(key, []).append((ri, ni, node, rec))
    answers: dict[tuple[int, int], dict[str, Any] | str] = {}
    for items in groups.values():
        node0, rec0 = items[0][2], items[0][3]
        req = {
            "tmux_socket": rec0.tmux_socket,
            "runs": [{"run": rec.run, "run_dir": node.run_dir, "node": ni} for _, ni, node, rec in items],
        }
        try:
            t = reader_for(node0.host)
            reply = agent_call(t, node0.workdir, node0.python, "status", req, timeout=STATUS_TIMEOUT_S)
            for (ri, ni, _, _), st in zip(items, reply["runs"]):
                answers[(ri, ni)] = st
        except LaunchError as e:
            why = f"{node0.label}: {e.message}" + (f" (fix: {e.fix})" if e.fix else "")
            for ri, ni, _, _ in items:
                answers[(ri, ni)] = why
    out = []
    for ri, rec in enumerate(records):
        parts = [answers.get((ri, ni), "no answer") for ni in range(len(rec.nodes))]
        st = _merge(rec, parts)
        if st["state"] != "lost":
            _remember_contact(st)
        else:  # also when the host answered that the run dir is gone: where the run was last seen
            seen = last_contact(rec.run)
            for key, field_ in (("last_contact", "time"), ("last_step", "step"), ("last_state", "state")):
                if st.get(key) is None:
                    st[key] = seen.get(field_)
        st.update(pod_fields(rec))
        st["resume"] = resume_advice(rec, st.get("last_state")) if st["state"] == "lost" else None
        st["recovery"] = _recovery(rec)
        if st["recovery"] and st["state"] == "lost":  # what is being done about it, wherever it shows
            st["error"] = f"{st['error']}; {st['recovery']['text']}"
        # A trainer's error (a hub URL with its token, an exception quoting an env value) reaches the
        # status's error and events verbatim: the run's secrets set here are masked in every string
        # of it, for status, --json, the dashboard and watch alike (logs does the same to its lines).
        out.append(_scrubbed(st, local_secret_values(rec)))
    return out


def _scrubbed(obj: Any, secrets: dict[str, str]) -> Any:
    """`obj` (a status: dicts, lists, strings) with every secret value masked (envspec.scrub)."""
    from launcher.config.envspec import scrub

    if not secrets:
        return obj
    if isinstance(obj, str):
        return scrub(obj, secrets)
    if isinstance(obj, dict):
        return {k: _scrubbed(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrubbed(v, secrets) for v in obj]
    return obj


def pod_fields(rec: RunRecord) -> dict[str, Any]:
    """`pod_id`, `price_hr`, `cost_usd` (every pod the run used, so far) of a provisioned run, and
    `pod_terminated` (every one of them ended: by nsa-launch, or seen gone from the API); None else."""
    cost = None
    if rec.pod_id:
        from launcher.providers.pods import run_cost

        cost = run_cost(rec.run)
    # the pod the record's host is on (during a replacement the ledger's newest pod is the new one)
    pod = rec.pod_id or (cost or {}).get("pod_id")
    price = (cost or {}).get("price_hr")
    if rec.pod_id:
        from launcher.providers.pods import load_pod

        own = load_pod(rec.pod_id)
        price = own.price_hr if own is not None else price
    ended = cost.get("terminated") if cost else None  # every pod of the run terminated
    return {
        "pod_id": pod,
        "price_hr": price,
        "cost_usd": (cost or {}).get("cost_usd"),
        "pod_terminated": ended,
    }


def resume_advice(rec: RunRecord, last_state: str | None, now: float | None = None) -> dict[str, Any]:
    """For a lost run: the mirror's newest checkpoint (`checkpoint`, `step`, `saved_at`: when its host
    saved it, `age_s`; None each when the mirror is empty) and the one `command` that resumes the run
    from it: `watch` replaces a rented pod (--provision), `restart --host NEW` moves a run to a host
    the user rents; with an empty mirror, `pull` once the host answers again (its checkpoints are only
    there). None for a run that had finished. A lost `status` used to name none of this."""
    import json

    from launcher.run.registry import mirror_dir
    from nsa.runfiles import CHECKPOINT_MANIFEST, RunDir, checkpoint_step

    now = time.time() if now is None else now
    # `latest` moves only after a pulled checkpoint verified here (launcher/recover/mirror.py): no hashing
    ck = RunDir(mirror_dir(rec.run)).latest_checkpoint()
    saved = None
    if ck is not None:
        try:  # the manifest's time: written by the trainer on the host as it saved the checkpoint
            saved = float(json.loads((ck / CHECKPOINT_MANIFEST).read_text())["time"])
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                saved = (ck / CHECKPOINT_MANIFEST).stat().st_mtime
    if last_state == "finished":
        command = None
    elif ck is None:
        command = f"nsa-launch pull --run {rec.run}"
    elif rec.provider:
        command = f"nsa-launch watch --run {rec.run}"
    else:
        new = ["--host NEW"] if len(rec.nodes) == 1 else [f"--host NEW{i}" for i in range(len(rec.nodes))]
        command = f"nsa-launch restart --run {rec.run} {' '.join(new)}"
    return {
        "checkpoint": ck.name if ck is not None else None,
        "step": checkpoint_step(ck.name) if ck is not None else None,
        "saved_at": saved,
        "age_s": None if saved is None else round(max(0.0, now - saved), 1),
        "command": command,
    }


def _recovery(rec: RunRecord) -> dict[str, Any] | None:
    """A replacement of the run's pod in progress (launcher/run/recovery_status.py), with its text, or None."""
    from launcher.run.recovery_status import recovery_status, recovery_text

    d = recovery_status(rec.run)
    return None if d is None else {**d, "text": recovery_text(d)}


def _merge(rec: RunRecord, parts: list[dict[str, Any] | str]) -> dict[str, Any]:
    head = parts[0]
    if isinstance(head, str):
        return _lost(rec, head)
    st = dict(head)
    st["host"], st["profile"] = rec.host, rec.profile
    errors = [p for p in parts[1:] if isinstance(p, str)]
    for p in parts[1:]:
        if isinstance(p, dict):
            st["heartbeat_age_s"] = {**st["heartbeat_age_s"], **p["heartbeat_age_s"]}
            st["gpus"] = st["gpus"] + p["gpus"]
            st["pids"] = st["pids"] + p["pids"]
            if p["state"] in ("failed", "stalled") and st["state"] in ("running", "starting", "restarting"):
                st["state"] = p["state"]
                st["error"] = f"node {p.get('host')}: {p.get('error') or p['state']}"
    if errors:
        st["state"] = (
            "lost" if st["state"] in ("running", "starting", "restarting", "stalled") else st["state"]
        )
        st["error"] = "; ".join(errors)
    return st


def kill_nodes(rec: RunRecord, nodes: list[NodeRecord]) -> dict[str, Any]:
    """Kill the run on the given nodes; merged verified result, with the final save's outcome:
    `final_save_failed`, the newest saved step (`saved_step`, the lowest over the nodes), the last
    trained step (`last_step`) and `final_save_cause` (launcher/host/kill.py)."""
    killed, remaining, msgs = True, [], []
    failed: list[tuple[str, dict[str, Any]]] = []
    saved: list[int | None] = []
    last = 0
    for node in nodes:
        t = transport_for(node.host)
        reply = agent_call(
            t,
            node.workdir,
            node.python,
            "kill",
            {
                "run": rec.run,
                "node": rec.nodes.index(node),
                "run_dir": node.run_dir,
                "tmux_socket": rec.tmux_socket,
                "grace_s": rec.kill_grace_s,
            },
            timeout=rec.kill_grace_s + 60,
        )
        killed = killed and bool(reply["killed"])
        remaining += [f"{node.label}:{p}" if len(nodes) > 1 else p for p in reply["remaining_pids"]]
        msgs.append(f"{node.label}: {reply['message']}")
        if reply.get("final_save_failed"):
            failed.append((node.label, reply))
        if reply.get("last_step") is not None:
            saved.append(reply.get("saved_step"))
            last = max(last, int(reply["last_step"]))
    out: dict[str, Any] = {"killed": killed, "remaining_pids": remaining, "message": "; ".join(msgs)}
    out["final_save_failed"] = bool(failed)
    if failed:
        steps = [s for s in saved if s is not None]
        out["saved_step"] = min(steps) if len(steps) == len(saved) else None
        out["last_step"] = last
        out["final_save_cause"] = "; ".join(
            (f"{label}: " if len(nodes) > 1 else "") + str(r.get("final_save_cause")) for label, r in failed
        )
    return out


def final_save_line(res: dict[str, Any]) -> str:
    """'the final save failed: CAUSE; the newest saved step is N, steps N+1..M are lost' for a kill
    result whose final save failed."""
    n, m = res.get("saved_step"), res.get("last_step")
    lost = (
        f"the newest saved step is {n}: steps {n + 1}..{m} are lost"
        if n is not None
        else (f"no checkpoint was saved: steps 1..{m} are lost")
    )
    return f"the final save failed: {res.get('final_save_cause')}; {lost}"


def kill_run(rec: RunRecord) -> dict[str, Any]:
    """CONT, TERM, grace, KILL on every node; verified. Idempotent. Holds the run's write lock
    (launcher/run/locks.py): a kill during a restart of the same run stops with the holder's name."""
    with changing(rec.run, "kill"):
        res = kill_nodes(rec, rec.nodes)
    if res["killed"]:
        _remember_killed(rec.run, res)
    return res


def _remember_killed(run: str, res: dict[str, Any]) -> None:
    """Keep `killed` as the run's last known state: a run killed here and later lost (its host shut
    down) read `last contact ... (running); the run may go on on its host`."""
    seen = last_contact(run)
    step = res.get("last_step", seen.get("step"))
    _write_seen(run, {**seen, "time": time.time(), "step": step, "state": "killed"})


# How long a kill or restart waits for another writer of the run (a pull takes seconds); a restart
# or a pod replacement holds it for minutes, and then the second command says who, instead.
CHANGE_WAIT_S = 10.0
_DOING = {"restart": "restarted", "kill": "killed"}


@contextlib.contextmanager
def changing(run: str, verb: str) -> Iterator[None]:
    """The run's write lock for `nsa-launch VERB`; when another process holds it past CHANGE_WAIT_S,
    RuntimeFailure "run R is being restarted by PID P" (killed, or what the holder says it does)."""
    import re

    from launcher.run.locks import RunLocked, run_lock, run_lock_holder

    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(run_lock(run, f"nsa-launch {verb}", timeout=CHANGE_WAIT_S))
        except RunLocked:
            holder = run_lock_holder(run)  # "pid N (nsa-launch restart)", "pid N (watch: pulling)"
            m = re.fullmatch(r"pid (\d+) \((.*)\)", holder)
            pid, who = (m.group(1), m.group(2)) if m else ("?", holder)
            what = next((v for k, v in _DOING.items() if who == f"nsa-launch {k}"), f"changed ({who})")
            raise RuntimeFailure(
                f"run {run} is being {what} by PID {pid} (waited {CHANGE_WAIT_S:.0f} s)",
                f"wait for that command to end (`nsa-launch status --run {run}` shows the run), then retry",
            ) from None
        yield


def gpu_processes(rec: RunRecord) -> list[dict[str, Any]] | None:
    """Every process holding GPU memory on the run's node hosts (launcher/host/gpuprocs.py rows, plus
    `node`: the node's index); None when no node has NVML (CPU hosts)."""
    rows: list[dict[str, Any]] = []
    any_nvml = False
    for i, node in enumerate(rec.nodes):
        reply = agent_call(transport_for(node.host), node.workdir, node.python, "gpu_procs", {}, timeout=30.0)
        if reply.get("rows") is not None:
            any_nvml = True
            rows += [{**r, "node": i} for r in reply["rows"]]
    return rows if any_nvml else None


def kill_gpu_process(rec: RunRecord, pid: int, node: int = 0, grace_s: float | None = None) -> dict[str, Any]:
    """Kill one process holding GPU memory on node `node` of the run's hosts; verified. The agent
    refuses a pid that NVML does not list as holding GPU memory at that moment."""
    n = rec.nodes[node]
    grace = rec.kill_grace_s if grace_s is None else grace_s
    req = {"pid": int(pid), "grace_s": grace}
    reply = agent_call(transport_for(n.host), n.workdir, n.python, "kill_gpu_proc", req, timeout=grace + 60)
    return {k: reply[k] for k in ("killed", "pid", "remaining_pids", "message")}


def restart_run(
    rec: RunRecord,
    wait: bool = True,
    *,
    sync: bool = True,
    say: Callable[[str], None] | None = None,
    wait_fn: Callable[[RunRecord], Any] | None = None,
) -> RunRecord:
    """Kill (verified; the trainer checkpoints first), re-sync the code (unless `sync` is false), then start again in the same run
    dir with --resume (latest checkpoint). A finished run is refused: there is nothing to resume.
    `say` reports each step; `wait_fn` replaces the plain first-heartbeat wait (the CLI's ticker).
    Holds the run's write lock (launcher/run/locks.py): a second restart or a kill of the run meanwhile
    stops after CHANGE_WAIT_S, naming this one's PID."""
    say = say or (lambda _msg: None)
    with changing(rec.run, "restart"):
        return _restart_locked(rec, wait, sync, say, wait_fn)


def _restart_locked(
    rec: RunRecord,
    wait: bool,
    sync: bool,
    say: Callable[[str], None],
    wait_fn: Callable[[RunRecord], Any] | None,
) -> RunRecord:
    from launcher.config.envspec import resolve_secrets

    [st] = fetch_status([rec])
    if st["state"] == "finished":
        raise LaunchError(
            f"run {rec.run} finished (step {st.get('step')}/{st.get('total_steps')}): nothing to resume",
            "start a new run: nsa-launch up --name NEW (raise train.steps with --set to train longer)",
        )
    # Every local input before the kill: a secret found missing after it left the run stopped, with
    # exit 2 saying nothing was started.
    try:
        secrets = resolve_secrets(rec.secrets, os.environ) if rec.secrets else {}
    except LaunchError as e:
        raise LaunchError(
            f"run {rec.run} was started with --secret {' --secret '.join(rec.secrets)}: {e.message}",
            f"{e.fix}, then `nsa-launch restart --run {rec.run}` again (the run was not stopped)",
        ) from None
    if st["state"] == "killed" and st.get("error"):
        say(f"{rec.run} was killed and then: {st['error']}")
    say(f"stopping {rec.run} on {rec.host} (state {st['state']})")
    res = kill_nodes(rec, rec.nodes)
    if not res["killed"]:
        raise RuntimeFailure(
            f"cannot restart {rec.run}: the old processes survive: {res['message']}",
            "stop them by hand on the host, then retry",
        )
    say(f"stopped: {res['message']}")
    if res.get("final_save_failed"):
        say(f"{final_save_line(res)}; resuming from the newest intact checkpoint")
    if sync:
        _resync(rec, say)
    for i, node in enumerate(rec.nodes):
        t = transport_for(node.host)
        reply = agent_call(
            t,
            node.workdir,
            node.python,
            "start",
            {
                "run": rec.run,
                "node": i,
                "run_dir": node.run_dir,
                "workdir": node.workdir,
                "resume": True,
                "tmux_socket": rec.tmux_socket,
                "secrets": secrets,
            },
            timeout=60,
        )
        if not reply.get("ok"):
            raise LaunchError(f"{node.label}: {reply.get('error')}", reply.get("fix", ""))
    say(f"started {rec.run} again with --resume; state restarting until its first heartbeat")
    if wait:
        (wait_fn or wait_first_heartbeat)(rec)
    return rec


TICK_S = 2.0  # how often the first-heartbeat wait reports back (one agent call each)


def wait_first_heartbeat(
    rec: RunRecord,
    timeout: float | None = None,
    on_tick: Callable[[float, float, str], None] | None = None,
) -> dict[str, Any]:
    """Block until a rank beats (or the run ends, or the timeout); fail fast with the log tail.

    Waits in slices of TICK_S, calling `on_tick(elapsed_s, timeout_s, last_log_line)` after each one
    that ended with the run still starting, so the wait is never silent."""
    from launcher.config.envspec import scrub

    node = rec.nodes[0]
    t = transport_for(node.host)
    timeout = rec.first_heartbeat_timeout_s if timeout is None else timeout
    secrets = local_secret_values(rec)
    t0 = time.monotonic()
    while True:
        left = max(timeout - (time.monotonic() - t0), 0.0)
        part = min(TICK_S, left)
        req = {"run": rec.run, "run_dir": node.run_dir, "tmux_socket": rec.tmux_socket, "timeout_s": part}
        reply = agent_call(t, node.workdir, node.python, "wait_started", req, timeout=part + 60)
        st = reply["status"]
        if not reply.get("timed_out") or part >= left:
            break
        if on_tick is not None:
            last = next((ln for ln in reversed(st.get("log_tail") or []) if ln.strip()), "")
            on_tick(time.monotonic() - t0, timeout, scrub(last, secrets))
    causes = st.get("error_lines") or []
    shown = (["first error lines:", *causes, "log tail:"] if causes else []) + st.get("log_tail", [])
    tail = "\n".join(f"    {ln}" for ln in scrub("\n".join(shown), secrets).splitlines())
    if reply.get("timed_out"):
        kill_run(rec)
        raise RuntimeFailure(
            f"run {rec.run}: no rank wrote a heartbeat within {timeout:.0f} s; stopped it. Log tail:\n{tail}",
            "read the full log with `nsa-launch logs --run "
            + rec.run
            + "`; raise first_heartbeat_timeout_s if the "
            "host is just slow",
        )
    if st["state"] in ("failed", "killed", "lost"):
        cause = scrub(st.get("error") or "", secrets)
        raise RuntimeFailure(
            f"run {rec.run} {st['state']} before its first step "
            f"(exit code {st.get('exit_code')}"
            + (f"; cause: {cause}" if cause else "")
            + f"). Log tail:\n{tail}",
            (f"fix the cause ({cause})" if cause else f"read `nsa-launch logs --run {rec.run}` for the cause")
            + ", then start again",
        )
    return st


def _resync(rec: RunRecord, say: Callable[[str], None]) -> None:
    """The code the run resumes with is this checkout's, as for `up` (local runs use it in place)."""
    from launcher.config.profiles import PROJECT_ROOT
    from launcher.core import format as fmt
    from launcher.ssh.sync import sync
    from launcher.ssh.transport import SSHTransport

    for node in rec.nodes:
        t = transport_for(node.host)
        if isinstance(t, SSHTransport):
            has_rsync = t.run("command -v rsync", check=False, timeout=30).exit_code == 0
            res = sync(PROJECT_ROOT, t, node.workdir, host_has_rsync=has_rsync)
            say(f"synced the project to {t.label}:{node.workdir} ({res.method}, {fmt.duration(res.seconds)})")


def resume_report(rec: RunRecord, since: float, timeout: float = 600.0) -> tuple[bool, str]:
    """After a restart: (ok, one line) saying where the run resumed, read from its own events.

    The trainer writes `boot` (at the loaded checkpoint's step, else 0) and, when it loaded one,
    `resumed` naming it just after (nsa/train/trainer.py; any `checkpoint_fallback` comes before
    both). So a `boot` at step N > 0 is waited on until its `resumed` is there too: stopping at the
    `boot` alone read the pair half written and said "from step 0" (~0.1 ms apart: rare, but a report
    must not guess). Waits for that, or for the run to end; never claims a checkpoint it did not load.
    """
    deadline = time.monotonic() + timeout
    while True:
        st = _status_since(rec, since)
        new = st.get("events_since") or []
        boot = next((e for e in new if e.get("kind") == "boot"), None)
        resumed = next((e for e in new if e.get("kind") == "resumed"), None)
        settled = boot is not None and (resumed is not None or not int(boot.get("step") or 0))
        if settled or st["state"] in ("failed", "killed", "lost", "finished"):
            break
        if time.monotonic() > deadline:
            if boot is not None:  # booted at a checkpoint's step; its `resumed` never came
                break
            return False, f"no boot event within {timeout:.0f} s of the restart (state {st['state']})"
        time.sleep(0.5)
    skipped = [e.get("detail") or {} for e in new if e.get("kind") == "checkpoint_fallback"]
    note = "".join(f"; skipped {d.get('checkpoint')}: {d.get('reason')}" for d in skipped)
    if resumed is not None:
        ck = (resumed.get("detail") or {}).get("checkpoint")
        why = "its newest intact checkpoint" + (", the newer ones failed verification" if skipped else "")
        return True, f"resumed at step {resumed.get('step')} from {ck} ({why}){note}"
    if boot is not None and int(boot.get("step") or 0):
        ended = st["state"] in ("failed", "killed", "lost")
        then = f"; then {st['state']}: {st.get('error') or 'see nsa-launch logs'}" if ended else ""
        return not ended, (
            f"resumed at step {boot.get('step')} (the trainer wrote no `resumed` event naming the "
            f"checkpoint){note}{then}"
        )
    if boot is not None:
        return True, f"started again from step 0: no checkpoint to resume from{note}"
    return False, f"{st['state']}: {st.get('error') or 'see nsa-launch logs'}"


def _status_since(rec: RunRecord, since: float) -> dict[str, Any]:
    """Node 0's status, with its resume-related events since `since` read from the whole events file
    (`events_since`): a training run writes many events after its boot, the last five miss it."""
    node = rec.nodes[0]
    req = {
        "tmux_socket": rec.tmux_socket,
        "runs": [{"run": rec.run, "run_dir": node.run_dir, "node": 0, "events_since": since}],
    }
    try:
        reply = agent_call(
            reader_for(node.host), node.workdir, node.python, "status", req, timeout=STATUS_TIMEOUT_S
        )
    except LaunchError as e:
        return _lost(rec, f"{node.label}: {e.message}")
    return reply["runs"][0]


def stream_log(rec: RunRecord, follow: bool = True, last_n: int = 200) -> Iterator[str]:
    """train.log lines from node 0: the last `last_n`, then (follow) new ones until the run ends."""
    node = rec.nodes[0]
    t = reader_for(node.host)
    secrets = local_secret_values(rec)
    if secrets:
        from launcher.config.envspec import scrub
    req = {"run_dir": node.run_dir, "last_n": last_n, "follow": follow}
    for line in agent_stream(t, node.workdir, node.python, "logs", req):
        yield scrub(line, secrets) if secrets else line


def local_secret_values(rec: RunRecord) -> dict[str, str]:
    """The values of the run's secrets in this environment, to mask them in anything shown."""
    return {n: os.environ[n] for n in rec.secrets if os.environ.get(n)}


@dataclass
class Tunnel:
    """A local 127.0.0.1 port that reaches the run's TensorBoard on its host."""

    url: str
    local_port: int
    remote_port: int
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)
    closed: bool = False

    def close(self) -> None:
        self.closed = True
        self._stack.close()

    def alive(self, timeout: float = 3.0) -> bool:
        """Whether the URL answers as TensorBoard would, now: an HTTP reply through the forward.

        A kill or a restart stops the run's TensorBoard; the forward still accepts, but the host
        refuses the channel and the connection closes without a reply. Showing that URL would be a
        lie, so callers ask this before they show it."""
        if self.closed:
            return False
        return http_answers(self.local_port, timeout)

    def __enter__(self) -> Tunnel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def http_answers(port: int, timeout: float = 3.0) -> bool:
    """True when 127.0.0.1:`port` answers an HTTP request with an HTTP status line."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"HEAD / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return s.recv(5) == b"HTTP/"
    except OSError:
        return False


def _tunnel_file(run: str, pid: int | None = None) -> Any:
    """This process's record of its tunnel to `run`. One file per tunnel process: with one file per
    run, a second tunnel overwrote the first's record and removed it on closing, and `status` said
    no tunnel while the first still served. Run names hold no dot, so `RUN.*.json` is only RUN's."""
    return registry.home() / "tunnels" / f"{run}.{os.getpid() if pid is None else pid}.json"


def record_tunnel(run: str, tun: Tunnel) -> None:
    """Say, for `status`, that this process holds a tunnel to the run's TensorBoard at `tun.url`."""
    from nsa.runfiles import atomic_write_json

    atomic_write_json(_tunnel_file(run), {"pid": os.getpid(), "url": tun.url, "local_port": tun.local_port})


def forget_tunnel(run: str) -> None:
    with contextlib.suppress(OSError):
        _tunnel_file(run).unlink()


def live_tunnel(run: str) -> str | None:
    """The URL of an `nsa-launch tunnel` to the run that answers now (the newest such record); None
    when none does. A record whose process is gone is removed."""
    import json

    def mtime(path: Any) -> float:
        try:
            return path.stat().st_mtime
        except OSError:  # removed meanwhile: its tunnel closed
            return 0.0

    paths = sorted((registry.home() / "tunnels").glob(f"{run}.*.json"), key=mtime, reverse=True)
    for path in paths:
        try:
            rec = json.loads(path.read_text())
            pid, url, port = int(rec["pid"]), str(rec["url"]), int(rec["local_port"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        except PermissionError:
            pass
        if http_answers(port, timeout=1.0):
            return url
    return None


class RunStopped(RuntimeFailure):
    """`open_tunnel(live_only=True)` of a run being killed or killed: no TensorBoard was started."""


def open_tunnel(rec: RunRecord, port: int = 6006, timeout: float = 90.0, live_only: bool = False) -> Tunnel:
    """Start TensorBoard for the run on its host (127.0.0.1 only) and forward a local port to it.

    `live_only` (a reopen after the run's TensorBoard stopped): raise RunStopped, starting nothing,
    when the run is being killed or was killed; a TensorBoard started then would outlive the kill."""
    node = rec.nodes[0]
    t = transport_for(node.host)
    reply = agent_call(
        t,
        node.workdir,
        node.python,
        "tensorboard",
        {
            "run": rec.run,
            "run_dir": node.run_dir,
            "python": node.python,
            "port": port,
            "tmux_socket": rec.tmux_socket,
            "timeout_s": timeout,
            "live_only": live_only,
        },
        timeout=timeout + 30,
    )
    if reply.get("stopped"):
        raise RunStopped(f"{node.label}: {reply.get('error')}", reply.get("fix", ""))
    if not reply.get("ok"):
        raise RuntimeFailure(f"{node.label}: {reply.get('error')}", reply.get("fix", ""))
    remote_port = int(reply["port"])
    if node.host.is_local:
        return Tunnel(f"http://127.0.0.1:{remote_port}/", remote_port, remote_port)
    fwd = t.forward_local(port, remote_port)  # already listening: the URL works at once
    tunnel = Tunnel(f"http://127.0.0.1:{fwd.local_port}/", fwd.local_port, remote_port)
    tunnel._stack.enter_context(fwd)
    return tunnel
