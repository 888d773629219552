"""`nsa-launch restart`: kill the run (verified; the trainer checkpoints on SIGTERM), re-sync the code,
resume it from its newest intact checkpoint, and say which step it resumed at (from the trainer's events).
With --host: move a run whose host is gone to new host(s), from the mirror's checkpoint."""

from __future__ import annotations

import dataclasses
import time

import click

from launcher.cli.app import Application
from launcher.cli.up import keeps_going, wait_for_first_heartbeat
from launcher.core.errors import EXIT_RUNTIME, LaunchError, RuntimeFailure
from launcher.run.control import resolve_run, restart_run, resume_report
from launcher.run.registry import RunRecord

MOVABLE = ("lost", "failed", "killed")  # a run still running (or restarting) on its host is never run twice


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option("--no-sync", is_flag=True, help="Resume with the code already on the host (no re-sync).")
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="[USER@]HOST[:PORT]",
    help="Move the run to this host (once per node), resuming from the mirror's checkpoint there: for a "
    "run whose host is lost (a rented pod is replaced by `nsa-launch watch`), or whose pods were all "
    "terminated.",
)
@click.option(
    "--ssh-config", type=click.Path(), help="With --host: OpenSSH config file resolving its aliases."
)
@click.option(
    "--python", help="With --host: absolute path of the new host's python. Default: as the run had."
)
@click.option("--workdir", help="With --host: project dir on the new host. Default: as the run had.")
@click.option("--accept-new-host-key", is_flag=True, help="With --host: record its unknown host key.")
@click.pass_obj
def restart(
    app: Application,
    run: str | None,
    no_sync: bool,
    hosts: tuple[str, ...],
    ssh_config: str | None,
    python: str | None,
    workdir: str | None,
    accept_new_host_key: bool,
) -> None:
    """Stop the run, sync this checkout to its host(s), start it again in the same run dir with
    --resume. A finished run is refused (nothing to resume).

    With --host, a run whose host is gone (lost, or ended: failed, killed) moves: the mirror's
    checkpoint (`nsa-launch pull`, `watch`), verified by its hashes, and run files are copied to the
    new host's run dir, the run starts there with --resume and the inputs it was launched with, and
    its record names the new host. A run still running on its host is refused (kill it first).
    """
    rec = resolve_run(run)
    if hosts:
        _move(app, rec, list(hosts), ssh_config, python, workdir, accept_new_host_key, no_sync)
        return
    if ssh_config or python or workdir or accept_new_host_key:
        raise LaunchError(
            "--ssh-config, --python, --workdir and --accept-new-host-key go with --host",
            f"add --host NEW to move {rec.run} to a new host, or drop them to restart it where it is",
        )
    since = time.time()
    try:
        restart_run(rec, sync=not no_sync, say=app.say, wait_fn=lambda r: wait_for_first_heartbeat(app, r))
        ok, line = resume_report(rec, since, rec.first_heartbeat_timeout_s)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(keeps_going(rec.run, rec.host, "stopped waiting")) from None
    if not ok:
        app.abort(
            f"{rec.run}: restarted on {rec.host}, then {line}",
            f"nsa-launch logs --run {rec.run}",
            code=EXIT_RUNTIME,
        )
    app.say(f"{rec.run}: restarted on {rec.host}: {line}")


def _pods_ended(rec: RunRecord) -> list[str]:
    """The ids of a rented run's pods when the ledger holds them all terminated; [] while one bills on
    or the ledger knows none (then `watch` is the way, and nothing may run the run twice)."""
    from launcher.providers.pods import pods_of_run

    pods = pods_of_run(rec.run)
    return [p.id for p in pods] if pods and all(p.terminated is not None for p in pods) else []


def _move(
    app: Application,
    rec: RunRecord,
    targets: list[str],
    ssh_config: str | None,
    python: str | None,
    workdir: str | None,
    accept_new_host_key: bool,
    no_sync: bool,
) -> None:
    """Every check before anything is copied or started (exit 2 for bad input, nothing changed), then
    the restore and resume under the run's write lock (a `watch` pulling meanwhile waits)."""
    from launcher.recover.mirror import mirror_dir, missing_parts
    from launcher.recover.replace import resume_from_mirror
    from launcher.run import registry
    from launcher.run.control import changing, fetch_status
    from launcher.ssh.hosts import parse_target
    from nsa.runfiles import RunDir

    if no_sync:
        raise LaunchError("--no-sync with --host: a new host needs the code", "drop --no-sync")
    if len(targets) != len(rec.nodes):
        raise LaunchError(
            f"run {rec.run} has {len(rec.nodes)} node(s); --host was given {len(targets)} time(s)",
            f"give --host once per node ({len(rec.nodes)})",
        )
    ended = _pods_ended(rec) if rec.provider else None
    if rec.provider and not ended:
        raise LaunchError(
            f"run {rec.run} runs on pod {rec.pod_id} (--provision {rec.provider}): a rented pod is replaced "
            "with one like it, and the lost one terminated, by `watch`",
            f"nsa-launch watch --run {rec.run}",
        )
    new_hosts = [parse_target(t, ssh_config) for t in targets]  # a malformed target: exit 2 here
    if ended:
        # Its pods are terminated (`--down-when-done` ends a failed run's pod after pulling it): nothing of
        # nsa-launch's bills for it any more, and the host given is one the user rents, as for a plain run.
        rec = dataclasses.replace(rec, provider=None, pod_id=None)
    ck = RunDir(mirror_dir(rec.run)).latest_checkpoint()
    if ck is None:
        raise LaunchError(
            f"the mirror of {rec.run} ({mirror_dir(rec.run)}) holds no checkpoint: nothing to move",
            f"`nsa-launch pull --run {rec.run}` while its host answers; else start over with `nsa-launch up`",
            exit_code=1,
        )
    with changing(rec.run, "restart --host"):
        [st] = fetch_status([rec])
        if st["state"] == "finished":
            raise LaunchError(f"run {rec.run} finished: nothing to resume", "start a new run: nsa-launch up")
        if st["state"] not in MOVABLE:
            raise LaunchError(
                f"run {rec.run} is {st['state']} on {rec.host}: moving it would run it twice",
                f"`nsa-launch kill --run {rec.run}` first, or `nsa-launch restart --run {rec.run}` to restart "
                "it where it is",
            )
        gap = missing_parts(rec, hashes=True)
        if gap is not None:
            raise RuntimeFailure(f"cannot move {rec.run}: {gap}", "restore that part by hand, or start over")
        if ended:
            app.say(f"run {rec.run}'s pod(s) {', '.join(ended)} terminated: it moves to a host you rent")
        app.say(f"moving {rec.run} ({st['state']} on {rec.host}) to {', '.join(h.label for h in new_hosts)}")
        node0 = rec.nodes[0]
        try:
            new_rec, restored = resume_from_mirror(
                rec, new_hosts, ssh_config, app.say, rec.first_heartbeat_timeout_s,
                where=new_hosts[0].label, event={"old_pod": None, "new_pod": None},
                python=python or (node0.python if node0.python.startswith("/") else None),
                workdir=workdir or rec.workdir_arg, accept_new_host_key=accept_new_host_key,
            )  # fmt: skip
        except KeyboardInterrupt:
            now = registry.load(rec.run)
            if now is not None and now.host != rec.host:  # started there: it goes on without us
                raise KeyboardInterrupt(keeps_going(rec.run, now.host, "stopped waiting")) from None
            raise KeyboardInterrupt(
                f"moving {rec.run} stopped before it started on {new_hosts[0].label}"
            ) from None
    app.say(f"{rec.run}: moved to {new_rec.host} from {restored or 'no checkpoint'}")
