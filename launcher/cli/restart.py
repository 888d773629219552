"""`nsa-launch restart`: kill the run (verified), then resume it from its latest checkpoint."""

from __future__ import annotations

import click

from launcher.app import Application
from launcher.control import resolve_run, restart_run


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.pass_obj
def restart(app: Application, run: str | None) -> None:
    """Stop the run and start it again in the same run dir with --resume."""
    rec = resolve_run(run)
    with app.spinner(f"restarting {rec.run}"):
        restart_run(rec)
    app.say(f"{rec.run}: restarted from its latest checkpoint on {rec.host}")
