"""`nsa-launch watch`: stay with a run until it ends: mirror it, and replace its pod when it is lost."""

from __future__ import annotations

import sys

import click

from launcher.cli.app import Application, Seconds
from launcher.core.errors import EXIT_OK, EXIT_RUNTIME


def stopped_line(what: str, run: str, e: KeyboardInterrupt) -> str:
    """ "pull of R stopped by SIGTERM; the mirror keeps step-12": what a stopped pull or watch leaves
    (a bare "stopped by SIGTERM" said nothing of the mirror until the qa walk of 2026-11-27)."""
    from launcher.recover.mirror import mirror_dir
    from nsa.runfiles import RunDir

    how = str(e).removeprefix("stopped by ") or "Ctrl-C"
    ck = RunDir(mirror_dir(run)).latest_checkpoint()
    return f"{what} of {run} stopped by {how}; the mirror keeps {ck.name if ck else 'no checkpoint'}"


@click.command()
@click.option("--run", "-r", help="Run id. Default: the most recent run.")
@click.option(
    "--pull-every",
    type=Seconds(min=0.0, min_open=True),
    default=None,
    help="Seconds between pulls of the mirror. Default: on every new checkpoint the status shows, and "
    "every half checkpoint interval (train.save_every x the measured step time, 5-60 s).",
)
@click.option(
    "--lost-after",
    type=Seconds(min=0.0),
    default=60.0,
    show_default=True,
    help="Seconds unreachable before a pod is replaced (0: at the first failed check).",
)
@click.option(
    "--poll", type=Seconds(min=0.0, min_open=True), default=5.0, show_default=True,
    help="Seconds between status checks.",
)  # fmt: skip
@click.option(
    "--max-replacements",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Pods to rent at most; a replacement pod that fails counts, and watch tries again.",
)
@click.option(
    "--ready-timeout", type=Seconds(min=0.0, min_open=True), default=900.0, show_default=True,
    help="Seconds to wait for a new pod.",
)  # fmt: skip
@click.option("--yes", "-y", is_flag=True, help="Terminate pods rented for the run but not in use, unasked.")
@click.option("--json", "as_json", is_flag=True, help="Print the final status as JSON.")
@click.pass_obj
def watch(
    app: Application,
    run: str | None,
    pull_every: float | None,
    lost_after: float,
    poll: float,
    max_replacements: int,
    ready_timeout: float,
    yes: bool,
    as_json: bool,
) -> None:
    """Pull the newest intact checkpoint on a schedule; replace a lost --provision pod and resume.

    One watcher acts on a run at a time: while another `watch` or a dashboard holds it, this one says
    who and waits, taking over when that one stops. On taking the run it offers to terminate pods
    rented for it that it is not on (left by a replacement that was killed; --yes: unasked).
    SIGTERM and SIGHUP are handled like Ctrl-C: a replacement under way terminates the pod it rented.
    Exit 0 when the run finished and its final pull brought the mirror to the host's newest verified
    checkpoint; 1 otherwise (the final pull failed, or the mirror is N steps behind: said).
    """
    from launcher.recover.watcher import watch as do_watch
    from launcher.run.control import resolve_run

    def confirm(question: str) -> bool:
        if yes:
            return True
        return sys.stdin.isatty() and click.confirm(question, default=False, err=True)

    rec = resolve_run(run)
    try:
        st = do_watch(
            rec.run, app.say, poll_s=poll, pull_every_s=pull_every, lost_after_s=lost_after,
            max_replacements=max_replacements, ready_timeout=ready_timeout, confirm=confirm,
        )  # fmt: skip
    except KeyboardInterrupt as e:
        raise KeyboardInterrupt(stopped_line("watch", rec.run, e) + (
            f"; nothing watches the run now: `nsa-launch watch --run {rec.run}` to watch it again"
        )) from None  # fmt: skip
    if as_json:
        app.emit_json(st)
    loss = st.get("loss")
    loss = f"{loss:.4f}" if isinstance(loss, (int, float)) else "not reported"
    app.say(f"run {rec.run} {st['state']} at step {st.get('step')} (loss {loss})")
    problem = (st.get("mirror") or {}).get("problem")
    if problem:
        app.say(f"mirror of {rec.run}: {problem}; `nsa-launch pull --run {rec.run}` to try again")
    raise SystemExit(EXIT_OK if st["state"] == "finished" and not problem else EXIT_RUNTIME)
