"""`nsa-launch pull`: copy a run's newest intact checkpoint, metrics, events and log to this machine."""

from __future__ import annotations

import click

from launcher.app import Application


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option("--json", "as_json", is_flag=True, help="Print what was pulled as JSON.")
@click.pass_obj
def pull(app: Application, run: str | None, as_json: bool) -> None:
    """Mirror the run to $NSA_LAUNCH_HOME/mirror/<run>/ (only a checkpoint that verifies is kept)."""
    from launcher.control import resolve_run
    from launcher.mirror import pull as do_pull

    res = do_pull(resolve_run(run), say=app.say)
    if as_json:
        app.emit_json(res)
    else:
        app.print(res["mirror"])
