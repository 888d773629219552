"""`nsa-launch dashboard`: validate the options, then run the Textual dashboard until `q`.

Owns the command's options and their checks only; everything on screen lives in launcher/dashboard.
Bad options exit 2 before any screen is drawn or host contacted. Never imports torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"nsa-launch dashboard: {message}", err=True)
    sys.exit(code)


@click.command("dashboard")
@click.option("--run", "run", metavar="RUN", help="Show only this run (default: the 10 most recent runs).")
@click.option("--all", "show_all", is_flag=True, help="Show every run launched from this machine.")
@click.option(
    "--refresh",
    type=float,
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Status poll period; an unreachable host is retried with backoff up to max(8 s, this).",
)
@click.option(
    "--replay",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Replay a recording (status.json + rundirs/ + nvidia-smi CSVs) instead of live runs: "
    "demos and benchmarks; kill/restart/tunnel then touch nothing.",
)
@click.option(
    "--pull-every",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Pull each live run's newest intact checkpoint, metrics, events and log to the local mirror "
    "this often. Default: on each new checkpoint, as `nsa-launch watch` does.",
)
@click.option(
    "--lost-after",
    type=float,
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Replace a --provision pod unreachable this long (or gone per the API), and resume there "
    "(0: at the first failed check, as `nsa-launch watch --lost-after 0`).",
)
@click.option(
    "--no-watch",
    is_flag=True,
    help="Only show runs: no mirror pulls, no pod replacement (leave it to `watch`).",
)
def dashboard(
    run: str | None,
    show_all: bool,
    refresh: float,
    replay: Path | None,
    pull_every: float | None,
    lost_after: float,
    no_watch: bool,
) -> None:
    """Watch runs live: table, log, GPUs, loss and tokens/s charts, events; kill/restart/tunnel.

    While open it also does what `nsa-launch watch` does for each live run: pulls the mirror on a
    schedule and replaces a lost --provision pod. One watcher acts on a run at a time (a `watch` or
    another dashboard already on it keeps it; this one takes over when that one stops).

    Keys: k kill, r restart, t tunnel, g GPU processes (x kills one), / search, f follow,
    l rank filter, ? help, q quit; Ctrl+P palette (Screenshot saves to $NSA_LAUNCH_HOME/screenshots).
    """
    # An option that would be silently ignored is bad input: `--no-watch --pull-every 5` pulled
    # nothing and `--replay DIR --lost-after 5` replaced nothing, and the user believed otherwise.
    given = [
        f"--{name.replace('_', '-')}"
        for name in ("pull_every", "lost_after", "no_watch")
        if click.get_current_context().get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    ]
    if replay is not None and given:
        _fail(f"--replay watches nothing (a recording), so {', '.join(given)} would be ignored; fix: drop it")
    if no_watch and (ignored := [g for g in given if g != "--no-watch"]):
        _fail(f"--no-watch: {', '.join(ignored)} would be ignored (no pulls, no replacement); fix: drop one")
    if run is not None and show_all:
        _fail("--run and --all exclude each other; fix: pass one of them (or neither for recent runs)")
    if not refresh > 0 or refresh > 3600:
        _fail(f"--refresh {refresh}: must be a number of seconds in (0, 3600]; fix: e.g. --refresh 1")
    if pull_every is not None and not 0 < pull_every <= 86400:
        _fail(
            f"--pull-every {pull_every}: must be a number of seconds in (0, 86400]; fix: e.g. --pull-every 60"
        )
    # 0 is what `watch --lost-after 0` takes (replace at the first failed check): the dashboard runs
    # the same Watcher, so the same value means the same thing (it used to be refused here only).
    if not 0 <= lost_after <= 86400:
        _fail(
            f"--lost-after {lost_after}: must be a number of seconds in [0, 86400]; fix: e.g. --lost-after 60"
        )

    from launcher.dashboard import make_app

    if replay is not None:
        if run is not None or show_all:
            _fail("--replay shows the whole recording; fix: drop --run/--all")
        from launcher.dashboard.recorded import RecordedBackend

        try:
            backend = RecordedBackend(replay)
        except ValueError as e:
            _fail(f"--replay {replay}: {e}")
    else:
        from launcher.dashboard.backend import LauncherBackend, Scope, WatchSettings

        try:
            watch = WatchSettings(not no_watch, pull_every_s=pull_every, lost_after_s=lost_after)
            backend = LauncherBackend(Scope(run=run, all=show_all), watch)
            if run is not None:
                backend.check_run()  # an unknown run is bad input: say so before drawing anything
        except ImportError as e:
            _fail(f"the launcher API is not available ({e}); fix: reinstall nsa-launch", 1)
        except Exception as e:
            code = getattr(e, "exit_code", 1)
            _fail(str(e), code if code in (1, 2) else 1)
    from launcher.run.registry import home

    make_app(
        backend, refresh_s=refresh, max_backoff_s=max(8.0, refresh), screenshot_dir=home() / "screenshots"
    ).run()
