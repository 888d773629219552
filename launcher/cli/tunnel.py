"""`nsa-launch tunnel`: TensorBoard for a run on its host, reachable at a local 127.0.0.1 URL.

It stays open until Ctrl-C or SIGTERM, or until the run is killed (`nsa-launch kill` stops its
TensorBoard too), which it notices by polling the run's status every POLL_S seconds and then ends,
saying so (exit 1), instead of forwarding to a port nothing listens on any more.
"""

from __future__ import annotations

import signal
import time

import click

from launcher.app import Application
from launcher.control import fetch_status, open_tunnel, resolve_run
from launcher.errors import EXIT_RUNTIME

POLL_S = 3.0


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option(
    "--port",
    default=6006,
    show_default=True,
    type=click.IntRange(1024, 65535),
    help="Local port; a busy one gets the next free.",
)
@click.pass_obj
def tunnel(app: Application, run: str | None, port: int) -> None:
    """Start TensorBoard on the host (127.0.0.1, in tmux) and forward a local port to it until Ctrl-C."""
    rec = resolve_run(run)
    with app.spinner(f"starting TensorBoard for {rec.run} on {rec.host}"):
        tun = open_tunnel(rec, port=port)
    app.print(tun.url)
    app.say(
        f"TensorBoard for {rec.run}: {tun.url}  (Ctrl-C closes the tunnel; TensorBoard keeps running "
        "on the host until `nsa-launch kill`)"
    )
    # SIGTERM (kill, a supervisor) closes the tunnel as Ctrl-C does, instead of dying mid-forward.
    signal.signal(signal.SIGTERM, _interrupt)
    why = None
    try:
        while why is None:
            time.sleep(POLL_S)
            st = fetch_status([rec])[0]
            if st["state"] == "killed":
                why = f"run {rec.run} was killed, and its TensorBoard with it"
    except KeyboardInterrupt:
        pass
    finally:
        tun.close()
    if why:
        app.abort(
            f"tunnel closed: {why}",
            f"after `nsa-launch restart --run {rec.run}`, open a new tunnel",
            code=EXIT_RUNTIME,
        )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
