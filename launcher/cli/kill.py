"""`nsa-launch kill`: stop a run on every node and verify that none of its processes is left."""

from __future__ import annotations

import click

from launcher.app import Application
from launcher.control import kill_run, resolve_run
from launcher.errors import EXIT_RUNTIME


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option("--json", "as_json", is_flag=True, help="Print the verified result as JSON.")
@click.pass_obj
def kill(app: Application, run: str | None, as_json: bool) -> None:
    """SIGTERM the run's processes, SIGKILL after the grace period, verify none is left. Idempotent."""
    rec = resolve_run(run)
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
