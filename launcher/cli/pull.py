"""`nsa-launch pull`: copy a run's newest intact checkpoint, metrics, events and log to this machine."""

from __future__ import annotations

import click

from launcher.cli.app import Application, Seconds
from launcher.cli.watch import stopped_line


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option(
    "--wait",
    "wait_s",
    default=120.0,
    show_default=True,
    type=Seconds(min=0.0),
    help="Seconds to wait while another writer (a `watch` pulling or replacing the pod) changes the run.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was pulled as JSON.")
@click.pass_obj
def pull(app: Application, run: str | None, wait_s: float, as_json: bool) -> None:
    """Mirror the run to $NSA_LAUNCH_HOME/mirror/<run>/ (only a checkpoint that verifies is kept).

    The mirror never goes back: a host checkpoint that does not verify is reported and the mirror keeps
    its newer good copy. One writer at a time: this waits for a `watch`, dashboard or `pods down`
    that is changing the run. Exit 1 when the pull failed (the mirror is then as it was). Ctrl-C,
    SIGTERM and SIGHUP stop the copy under way (exit 130; the mirror is as it was).
    """
    from launcher.core.signals import hangups_as_interrupt
    from launcher.recover.mirror import pull as do_pull
    from launcher.run.control import resolve_run
    from launcher.run.locks import run_lock

    rec = resolve_run(run)
    # Without this a SIGTERM killed only this process: its rsync went on copying the checkpoint into
    # the mirror's .tmp- dir, unwatched (the qa walk of 2026-11-27). As a KeyboardInterrupt it stops
    # that rsync and removes the copy (transfer._run_watched, mirror._fetch).
    restore = hangups_as_interrupt()
    try:
        with run_lock(rec.run, "nsa-launch pull", timeout=wait_s):
            res = do_pull(rec, say=app.say)
    except KeyboardInterrupt as e:
        raise KeyboardInterrupt(stopped_line("pull", rec.run, e)) from None
    finally:
        restore()
    if as_json:
        app.emit_json(res)
    else:
        app.print(res["mirror"])
