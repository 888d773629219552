"""`nsa-launch tunnel`: TensorBoard for a run on its host, reachable at a local 127.0.0.1 URL."""

from __future__ import annotations

import signal
import time

import click

from launcher.app import Application
from launcher.control import open_tunnel, resolve_run


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
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        tun.close()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
