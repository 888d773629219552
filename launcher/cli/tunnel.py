"""`nsa-launch tunnel`: TensorBoard for a run on its host, reachable at a local 127.0.0.1 URL.

It stays open until Ctrl-C or SIGTERM (exit 130, as every interrupted command). Every POLL_S
seconds it asks whether TensorBoard still answers through the tunnel; a kill or a restart stops the
run's TensorBoard on the host. While the run lives on (a restart, a crash the host restarted), the
tunnel starts TensorBoard again and reopens on the same local port, so the URL stays valid. When
the run has ended (killed, failed), it closes, says so with the command to reopen it, and exits 1,
instead of forwarding to a port nothing listens on any more. An unreachable host is waited for:
one line when it goes, one when it is back.
"""

from __future__ import annotations

import signal
import time

import click

from launcher.cli.app import Application
from launcher.core.errors import EXIT_RUNTIME, LaunchError
from launcher.core.format import LIVE_STATES
from launcher.run.control import (
    RunStopped,
    Tunnel,
    fetch_status,
    forget_tunnel,
    open_tunnel,
    record_tunnel,
    resolve_run,
)
from launcher.run.registry import RunRecord

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
    """Start TensorBoard on the host (127.0.0.1, in tmux) and forward a local port to it until Ctrl-C.

    Follows the run across restarts (TensorBoard is started again, same URL); closes with exit 1
    when the run has ended and its TensorBoard stopped; Ctrl-C exits 130."""
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
    record_tunnel(rec.run, tun)  # `status` shows the URL while it answers
    try:
        why, tun = follow(app, rec, tun)
    except KeyboardInterrupt:
        tun.close()
        # the CLI root turns this into exit 130 with the message
        raise KeyboardInterrupt(
            f"tunnel closed; TensorBoard keeps running on the host until `nsa-launch kill --run {rec.run}`"
        ) from None
    finally:
        tun.close()
        forget_tunnel(rec.run)
    app.abort(
        f"tunnel closed: {why}",
        f"reopen it with `nsa-launch tunnel --run {rec.run}` (after `nsa-launch restart --run {rec.run}` "
        "for a killed run)",
        code=EXIT_RUNTIME,
    )


def follow(app: Application, rec: RunRecord, tun: Tunnel, poll_s: float = POLL_S) -> tuple[str, Tunnel]:
    """Keep `tun` pointing at the run's TensorBoard until the run has ended; (why it ended, the
    tunnel now open). One line per change of state, never one per poll."""
    note = None  # the last thing said about a tunnel that does not answer
    while True:
        time.sleep(poll_s)
        if tun.alive():
            if note is not None:
                app.say(f"TensorBoard for {rec.run} answers again: {tun.url}")
                note = None
            continue
        st = fetch_status([rec])[0]
        state = st["state"]
        if state == "lost":
            if note != "lost":
                app.say(f"host of {rec.run} unreachable ({st.get('error')}); the tunnel waits for it")
                note = "lost"
            continue
        if state not in LIVE_STATES:
            return f"run {rec.run} is {state}, and its TensorBoard stopped with it", tun
        if note != "reopening":
            app.say(f"TensorBoard for {rec.run} stopped (the run was restarted): starting it again")
            note = "reopening"
        old_url, local_port = tun.url, tun.local_port
        tun.close()
        try:
            tun = open_tunnel(rec, port=local_port, live_only=True)
        except RunStopped:  # a kill began after the status said live: the next poll says how it ended
            continue
        except LaunchError as e:  # the host is slow to give the port back, or TB fails: retry
            app.say(f"reopening the tunnel failed: {e.message}; retrying in {poll_s:.0f}s")
            continue
        moved = "" if tun.url == old_url else f" (port {local_port} was taken: a new URL)"
        record_tunnel(rec.run, tun)
        app.say(f"TensorBoard for {rec.run}: {tun.url}{moved}")
        note = None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
