"""`nsa-launch kill`: stop a run on every node and verify that none of its processes is left; exit 1 when
the trainer's final save failed, naming the newest saved step and the steps lost."""

from __future__ import annotations

import sys

import click

from launcher.cli.app import Application
from launcher.core.errors import EXIT_RUNTIME
from launcher.run.control import final_save_line, kill_run, resolve_run


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option(
    "--yes", "-y", is_flag=True, help="Do not ask for confirmation (it is asked only on a terminal)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the verified result as JSON.")
@click.pass_obj
def kill(app: Application, run: str | None, yes: bool, as_json: bool) -> None:
    """SIGTERM the run's processes (SIGCONT first to stopped ones), SIGKILL after the grace period,
    verify none is left. Idempotent. Exits 1 when the final save failed (it names the newest saved
    step N and the lost steps N+1..M) or a process survives.

    On a terminal it first shows which run it will stop and asks; --yes skips the question. A run on a
    pod `up --provision` rented keeps its pod (and its checkpoints there): kill says that the pod bills
    on and that `nsa-launch pods down RUN` pulls the checkpoint and terminates it."""
    rec = resolve_run(run)
    if not yes and sys.stdin.isatty():
        which = "" if run else " (the most recent run; pick another with --run)"
        app.say(f"kill run {rec.run}{which}: profile {rec.profile} on {rec.host}, run dir {rec.run_dir}")
        if not click.confirm("stop it?", default=False, err=True):
            app.say(f"{rec.run}: not stopped")
            return
    with app.spinner(f"stopping {rec.run} on {rec.host}"):
        res = kill_run(rec)
    if as_json:
        app.emit_json({"run": rec.run, **res})
    else:
        app.say(f"{rec.run}: {res['message']}")
    if rec.pod_id:  # a rented pod bills on after its trainer stops: say so, with the command that ends it
        from launcher.providers.pods import still_billing

        billing = still_billing(rec.run)
        if billing:
            app.say(f"{rec.run}: {billing}")
    if not res["killed"]:
        app.abort(
            f"{rec.run}: processes survive: {res['remaining_pids']}",
            "stop them by hand on the host",
            code=EXIT_RUNTIME,
        )
    if res.get("final_save_failed"):
        app.abort(
            f"{rec.run}: stopped, but {final_save_line(res)}",
            f"fix the cause, then `nsa-launch restart --run {rec.run}` resumes from the newest saved step",
            code=EXIT_RUNTIME,
        )
