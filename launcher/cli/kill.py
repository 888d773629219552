"""`nsa-launch kill`: stop a run on every node and verify that none of its processes is left."""

from __future__ import annotations

import sys

import click

from launcher.app import Application
from launcher.control import kill_run, resolve_run
from launcher.errors import EXIT_RUNTIME


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option(
    "--yes", "-y", is_flag=True, help="Do not ask for confirmation (it is asked only on a terminal)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the verified result as JSON.")
@click.pass_obj
def kill(app: Application, run: str | None, yes: bool, as_json: bool) -> None:
    """SIGTERM the run's processes, SIGKILL after the grace period, verify none is left. Idempotent.

    On a terminal it first shows which run it will stop and asks; --yes skips the question."""
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
    if not res["killed"]:
        app.abort(
            f"{rec.run}: processes survive: {res['remaining_pids']}",
            "stop them by hand on the host",
            code=EXIT_RUNTIME,
        )
