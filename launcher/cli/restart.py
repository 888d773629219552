"""`nsa-launch restart`: kill the run (verified; the trainer checkpoints on SIGTERM), re-sync the code,
resume it from its newest intact checkpoint, and say which step it resumed at (from the trainer's events)."""

from __future__ import annotations

import time

import click

from launcher.cli.app import Application
from launcher.cli.up import keeps_going, wait_for_first_heartbeat
from launcher.core.errors import EXIT_RUNTIME
from launcher.run.control import resolve_run, restart_run, resume_report


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option("--no-sync", is_flag=True, help="Resume with the code already on the host (no re-sync).")
@click.pass_obj
def restart(app: Application, run: str | None, no_sync: bool) -> None:
    """Stop the run, sync this checkout to its host(s), start it again in the same run dir with
    --resume. A finished run is refused (nothing to resume)."""
    rec = resolve_run(run)
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
