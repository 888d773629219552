"""`nsa-launch restart`: kill the run (verified; the trainer checkpoints on SIGTERM), then resume it
from its newest intact checkpoint, and say which step it resumed at (from the trainer's events)."""

from __future__ import annotations

import time

import click

from launcher.app import Application
from launcher.control import resolve_run, restart_run, resume_report
from launcher.errors import EXIT_RUNTIME


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.pass_obj
def restart(app: Application, run: str | None) -> None:
    """Stop the run and start it again in the same run dir with --resume."""
    rec = resolve_run(run)
    since = time.time()
    with app.spinner(f"restarting {rec.run}"):
        restart_run(rec)
        ok, line = resume_report(rec, since, rec.first_heartbeat_timeout_s)
    if not ok:
        app.abort(
            f"{rec.run}: restarted on {rec.host}, then {line}",
            f"nsa-launch logs --run {rec.run}",
            code=EXIT_RUNTIME,
        )
    app.say(f"{rec.run}: restarted on {rec.host}: {line}")
