"""`nsa-launch up`: validate, start a run, wait for its first heartbeat (and, with --wait, its end)."""

from __future__ import annotations

import contextlib
import time

import click
from rich.progress import BarColumn, Progress, TextColumn

from launcher.cli.app import Application
from launcher.cli.pods import OFFER_KEYS, choice_from, offer_options, ready_timeout_option
from launcher.core import format as fmt
from launcher.core.errors import EXIT_OK, EXIT_RUNTIME
from launcher.host.logtail import error_lines
from launcher.launch.execute import execute, wait_first_heartbeat
from launcher.launch.plan import UpOptions, plan_run
from launcher.run.control import fetch_status, stream_log

TERMINAL = ("finished", "failed", "killed", "lost")


@click.command()
@click.option(
    "--profile", "-P", help="Profile name (nsa-launch profiles) or a profile .yaml path. Default: cpu."
)
@click.option(
    "--host", "hosts", multiple=True, help="Alias, user@host[:port] or 'user@host -p PORT'; once per node."
)
@click.option("--ssh-config", type=click.Path(), help="OpenSSH config file resolving --host aliases.")
@click.option("--config", "-c", help="Training config YAML. Default: the profile's.")
@click.option(
    "--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE", help="Config override (repeatable)."
)
@click.option("--env", "envs", multiple=True, metavar="NAME=VALUE", help="Runtime env var (docs/env.md).")
@click.option(
    "--secret", "secrets", multiple=True, metavar="NAME", help="Pass a secret by name from your env."
)
@click.option(
    "--name",
    help="Run id (letters, digits, - and _). Default: <config>-<MMDD>-<4 hex>, at most 24 characters.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the named run from its newest intact checkpoint, with the config, --set, --env and "
    "--secret it was launched with (each one given here replaces the recorded one). Not with --provision.",
)
@click.option(
    "--from-scratch",
    is_flag=True,
    help="With --resume: start the named run over from step 0 in its run dir (its checkpoints are moved "
    "aside to checkpoints/aside-*, not deleted).",
)
@click.option("--wait", is_flag=True, help="Block until the run ends; exit 0 only if it finished.")
@click.option("--python", help="Absolute path of the host's python (overrides the profile's host.python).")
@click.option("--workdir", help="Project dir on an SSH host (overrides host.workdir; relative: to its home).")
@click.option("--accept-new-host-key", is_flag=True, help="Record an unknown host key (first contact only).")
@click.option(
    "--max-restarts",
    type=click.IntRange(0, 100),
    help="Restarts from the newest intact checkpoint after a crash, on the host (default: the profile's, 3).",
)
@click.option(
    "--allreduce-check/--no-allreduce-check",
    default=None,
    help="A short all-reduce across every rank before training (default: on with > 1 GPU or node).",
)
@click.option(
    "--provision",
    type=click.Choice(["prime"]),
    help="Rent the host from Prime Intellect (docs/launcher.md 'Renting pods') instead of --host; "
    "terminated if up fails before the run is going (after that, and after `kill`: `pods down RUN`).",
)
@click.option("--gpu-type", help="With --provision: Prime GPU type (default: the profile's expect.gpu_name).")
@ready_timeout_option("With --provision: seconds to wait for SSH.")
@click.option(
    "--down-when-done",
    is_flag=True,
    help="With --provision: wait for the run, pull it (checkpoint, logs, events), terminate the pod "
    "(implies --wait). A failed run's pod goes too (its logs are in the mirror); a pull that fails or is "
    "interrupted, or a run stopped by `kill`, keeps the pod, said to bill on.",
)
@click.option(
    "--keep-failed",
    is_flag=True,
    help="With --down-when-done: keep the pod of a run that failed, for inspection (it bills on until "
    "`nsa-launch pods down RUN`).",
)
@offer_options
@click.option(
    "--dry-run",
    is_flag=True,
    help="With --provision: validate, list the offers and the one it would rent; rent nothing.",
)
@click.pass_obj
def up(
    app: Application,
    hosts: tuple[str, ...],
    sets: tuple[str, ...],
    envs: tuple[str, ...],
    secrets: tuple[str, ...],
    wait: bool,
    provision: str | None,
    gpu_type: str | None,
    ready_timeout: float,
    down_when_done: bool,
    keep_failed: bool,
    dry_run: bool,
    **kw: object,
) -> None:
    """Start a training run (default: the cpu profile on this machine, or a rented pod with --provision)."""
    renting = [k for k in OFFER_KEYS if kw.get(k) not in (None, False)]
    choice = choice_from(kw)  # type: ignore[arg-type]
    if (gpu_type or down_when_done or dry_run or renting) and not provision:
        given = ["--" + k.replace("_name", "").replace("_", "-") for k in renting]
        given += (
            ["--gpu-type"] * bool(gpu_type) + ["--down-when-done"] * down_when_done + ["--dry-run"] * dry_run
        )
        app.abort(f"{' '.join(given)} need --provision prime", "add --provision prime")
    if keep_failed and not down_when_done:  # without it nothing terminates the pod anyway
        app.abort("--keep-failed goes with --down-when-done", "add --down-when-done, or drop --keep-failed")
    if provision and hosts:
        app.abort("--provision rents the host, so --host cannot be given too", "drop --host or --provision")
    if provision and kw.get("resume"):
        # A pod rented now holds no run dir: the resume failed on it after the rent (billed, nothing run).
        run = kw.get("name") or "RUN"
        app.abort(
            f"--resume continues run {run} in its run dir, and a pod rented now has none: nothing to resume there",
            f"where its pod still runs: `nsa-launch restart --run {run}`; where the pod was lost: `nsa-launch "
            f"watch --run {run}` rents a replacement and resumes from the local mirror; where it ended (a "
            f"failed run's, terminated by --down-when-done): `nsa-launch restart --run {run} --host NEW` "
            "resumes it from the mirror on a host you give (docs/launcher.md 'Recovery'); or start anew "
            "without --resume",
        )
    client = None
    if provision:
        from launcher.config.profiles import load_profile
        from launcher.providers.prime import PrimeClient

        client = PrimeClient()  # no PRIME_API_KEY: exit 2 here, before anything is validated remotely
        hosts = ("pod.pending",) * load_profile(kw.get("profile")).nodes  # type: ignore[arg-type]
    opts = UpOptions(
        hosts=list(hosts),
        sets=list(sets),
        env=list(envs),
        secrets=list(secrets),
        **{k: v for k, v in kw.items() if v is not None and v is not False},
    )  # type: ignore[arg-type]
    plan = plan_run(opts)
    if not provision:
        from launcher.launch.plan import check_resume_target

        check_resume_target(plan)  # `up --resume --name R` of a run that ran elsewhere: say where
    from launcher.launch.plan import with_recorded_inputs

    # `up --resume --name R` (where R ran, checked above first): R's own config, --set, --env, --secret
    opts, recorded = with_recorded_inputs(opts)
    if recorded:
        plan = plan_run(opts)
        app.say(f"resuming {plan.run} with what it was launched with: {', '.join(recorded)}")
    app.say(
        f"run {plan.run}: profile {plan.profile.name} ({plan.profile.world_size} workers), "
        f"config {plan.config_path.name} [{plan.config_hash}], {plan.total_steps} steps"
    )
    if dry_run:
        from launcher.cli.pods import print_offers

        if choice.ssh_key_id:
            from launcher.providers.offers import check_ssh_key

            check_ssh_key(client, choice.ssh_key_id)
        print_offers(app, client, plan.profile, gpu_type, choice, as_json=False)
        app.say("dry run: nothing rented")
        return
    pod = None
    rec = None
    from launcher.core.signals import signals_as_interrupt

    # SIGTERM / SIGHUP (a closed terminal) while renting or starting are a Ctrl-C: the pod is terminated
    with signals_as_interrupt() if client is not None else contextlib.nullcontext():
        if client is not None:
            # bad options, unknown GPU type, no stock, quota: provision fails before creating a pod
            pod, plan.hosts = _rent(app, client, plan, gpu_type, ready_timeout, choice)
            plan.opts.accept_new_host_key = (
                True  # a new pod's key cannot be known before (trust on first use)
            )
        try:
            rec = _start(app, plan)
            if pod is not None:  # recorded before any wait: `pods down RUN` must find it after a Ctrl-C
                rec.provider, rec.pod_id = provision, pod.id
                from launcher.run import registry

                registry.save(rec)
            st = wait_for_first_heartbeat(app, rec)
        except KeyboardInterrupt:
            if rec is None:  # nothing started yet: nothing may keep billing
                _terminate(app, client, pod, "up was interrupted")
                raise
            raise KeyboardInterrupt(
                keeps_going(rec.run, rec.host, "stopped waiting") + _bills_on(pod, rec.run, down_when_done)
            ) from None
        except BaseException:
            _terminate(app, client, pod, "up failed")
            raise
    # SIGTERM / SIGHUP while waiting on a rented pod are a Ctrl-C too: they killed `up` without a word
    # before, and --down-when-done with it (the pod billed on after the run ended).
    with signals_as_interrupt() if pod is not None else contextlib.nullcontext():
        try:  # from here on a Ctrl-C, even one landing while the next steps print, leaves the run going
            app.say(f"run {rec.run} is {st['state']} (step {st['step']}/{rec.total_steps}) on {rec.host}")
            app.print(rec.run)
            app.say(next_steps(rec.run, pod is not None))
            if not (wait or down_when_done):
                return
            st = _wait_end(app, rec)
        except KeyboardInterrupt:
            raise KeyboardInterrupt(
                keeps_going(rec.run, rec.host, "stopped waiting") + _bills_on(pod, rec.run, down_when_done)
            ) from None
        if down_when_done and pod is not None:
            try:
                _down_when_done(app, client, pod, rec, st, keep_failed)
            except KeyboardInterrupt as e:  # the final pull (or a line before it): the pod is still there
                if pod.terminated is not None:
                    raise
                raise KeyboardInterrupt(f"{e or 'interrupted'}" + _final_bills_on(pod, rec.run, st)) from None
    raise SystemExit(EXIT_OK if st["state"] == "finished" else EXIT_RUNTIME)


def _down_when_done(app: Application, client, pod, rec, st: dict, keep_failed: bool = False) -> None:
    """Pull the ended run (its newest intact checkpoint, logs, events), then terminate its pod: a failed
    run's too (an idle pod billed overnight for a user who asked for down-when-done), unless
    --keep-failed. The pod is kept, said to bill on with the commands, when the pull fails (the
    checkpoint is only on the pod: terminating it would lose the trained model) and when `kill`
    stopped the run (kill stops the trainer, not the pod: the user may `restart` it there). A Ctrl-C,
    SIGTERM or SIGHUP during the pull stops it with the pull's own words (what the mirror keeps); `up`
    adds the pod that bills on (_final_bills_on). A run lost with its pod, which the API says is gone
    (terminated in the web app), has nothing to pull or terminate: said so, not shouted as billing."""
    from launcher.core.errors import LaunchError
    from launcher.providers.pods import terminate_or_shout
    from launcher.recover.mirror import pull

    state = st["state"]
    price = f" at ${pod.price_hr:.2f}/h" if pod.price_hr is not None else ""
    if state == "killed" or (state != "finished" and keep_failed):
        why = "was stopped by `kill`" if state == "killed" else f"{state} (--keep-failed)"
        app.say(
            f"run {rec.run} {why}: pod {pod.id} kept, billing{price}; "
            f"`nsa-launch pods down {rec.run}` pulls its newest checkpoint and terminates it"
        )
        return
    if state == "lost":  # a pod terminated in the web app loses its run: asked, not pulled and shouted about
        from launcher.providers.pods import load_pod, settle_gone

        cur = load_pod(pod.id) or pod  # the ledger: a status poll may have seen it gone already
        for line in settle_gone([cur], client):
            app.say(line)
        if cur.terminated is not None:
            pod.terminated = cur.terminated
            app.say(
                f"run {rec.run} lost with pod {pod.id}, terminated outside nsa-launch: nothing to pull or terminate"
            )
            return
    try:
        res = pull(rec, say=app.say, who="nsa-launch up --down-when-done")
    except KeyboardInterrupt as e:  # the pull's own words (what the mirror keeps); up adds the pod's
        from launcher.cli.watch import stopped_line

        raise KeyboardInterrupt(stopped_line("pull", rec.run, e)) from None
    except (LaunchError, OSError) as e:
        what = e.message if isinstance(e, LaunchError) else f"{type(e).__name__}: {e}"
        fix = f"; {e.fix}" if isinstance(e, LaunchError) and e.fix else ""
        app.say(
            f"!!! POD {pod.id} IS STILL BILLING{price}: run {rec.run} {state}, but pulling it failed "
            f"({what}{fix}). The pod is NOT terminated: the run's newest checkpoint is only there. "
            f"Pull it: `nsa-launch pull --run {rec.run}`, then end the billing: "
            f"`nsa-launch pods down {rec.run}`"
        )
        raise SystemExit(EXIT_RUNTIME) from None
    if state != "finished":
        mirror = res["mirror"]
        app.say(
            f"run {rec.run} {state}: its log and events are in the mirror, {mirror}/train.log and "
            f"{mirror}/events.jsonl (checkpoint {res['checkpoint'] or 'none'}); terminating pod {pod.id}, "
            f"so `restart` above has no pod to run on: `nsa-launch restart --run {rec.run} --host NEW` "
            "continues it from the mirror on a host you give (--keep-failed keeps a failed run's pod, for "
            "inspection or `restart` there)"
        )
    if not terminate_or_shout(client, pod, app.say):
        raise SystemExit(EXIT_RUNTIME)


def _rent(app: Application, client, plan, gpu_type, ready_timeout, choice):
    from launcher.providers.pods import provision as rent

    return rent(
        client, plan.profile, gpu_type, plan.run, plan.run, app.say, ready_timeout, plan.opts.ssh_config,
        choice=choice,
    )  # fmt: skip


def _start(app: Application, plan):
    if app.err.is_terminal:
        with Progress(
            TextColumn("sync"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            console=app.err,
            transient=True,
        ) as bar:
            task = bar.add_task("sync", total=100)
            rec, started_s = execute(
                plan, say=app.say, on_sync_progress=lambda pct: bar.update(task, completed=pct)
            )
    else:
        rec, started_s = execute(plan, say=app.say)
    app.say(
        f"torchrun started on {len(rec.nodes)} node(s) in {fmt.duration(started_s)}; waiting for the first heartbeat"
    )
    return rec


def _bills_on(pod, run: str, down_when_done: bool) -> str:
    """What a Ctrl-C on `up` leaves billing: the rented pod, and that --down-when-done went with `up`."""
    if pod is None:
        return ""
    gone = (
        " (--down-when-done ended with this `up`: nothing terminates it when the run ends)"
        if down_when_done
        else ""
    )
    return (
        f". Pod {pod.id} bills on{gone}: `nsa-launch pods down {run}` pulls the newest checkpoint and "
        "terminates it"
    )


def _final_bills_on(pod, run: str, st: dict) -> str:
    """What a Ctrl-C, SIGTERM or SIGHUP during --down-when-done's end (the final pull, before the pod is
    terminated) leaves billing: it exited with the pull's words only, the pod of an ended run unnamed."""
    price = f" at ${pod.price_hr:.2f}/h" if pod.price_hr is not None else ""
    return (
        f". Run {run} {st['state']}; pod {pod.id} bills on{price} (--down-when-done stopped before "
        f"terminating it): `nsa-launch pods down {run}` pulls the newest checkpoint and terminates it"
    )


def _terminate(app: Application, client, pod, why: str) -> None:
    """A pod `up` rented is terminated when up fails before the run is going: nothing left billing."""
    if pod is None:
        return
    from launcher.providers.pods import terminate_or_shout

    app.say(f"{why}; terminating pod {pod.id} so nothing is left billing")
    terminate_or_shout(client, pod, app.say)  # never raises: the error that ended `up` is reported


def _wait_end(app: Application, rec):
    last = -1.0
    while True:
        st = fetch_status([rec])[0]
        if st["state"] in TERMINAL:
            break
        if time.monotonic() - last > 5:
            eta = f" eta {fmt.duration(st['eta_s'])}" if isinstance(st.get("eta_s"), (int, float)) else ""
            app.say(
                f"  {st['state']}: step {fmt.step_total(st['step'], st['total_steps'])} loss {fmt.loss(st['loss'])} "
                f"{fmt.tok_rate(st['tokens_per_s'])}{eta}"
            )
            last = time.monotonic()
        time.sleep(1.0)
    app.say(run_summary(st, rec.run, rec.host))
    if st["state"] != "finished":
        if st.get("error"):
            app.say(f"  error: {st['error']}")
        for ev in st.get("events") or []:
            if ev.get("kind") == "error":  # the trainer's own account of what went wrong
                detail = ev.get("detail") or {}
                what = ": ".join(str(detail[k]) for k in ("error", "message") if detail.get(k)) or str(detail)
                app.say(f"  error event at step {ev.get('step')}: {what}")
        if st["state"] != "lost":
            for line in error_lines(list(stream_log(rec, follow=False, last_n=300))):
                app.say(f"  {line}")
            app.say(f"  full log: nsa-launch logs --run {rec.run} -n 500")
    return st


def run_summary(st: dict, run: str, host: str) -> str:
    """How `up --wait` ends: the run, its final step, loss, tokens/s, wall time, the newest checkpoint
    and the commands that come next, every number through launcher/core/format.py."""
    events = [e for e in st.get("events") or [] if isinstance(e, dict)]
    done = next((e.get("detail") or {} for e in reversed(events) if e.get("kind") == "finished"), {})
    tokens, wall = done.get("tokens"), done.get("wall_s")
    if isinstance(tokens, (int, float)) and isinstance(wall, (int, float)) and wall > 0:
        rate = f"{fmt.tok_rate(tokens / wall)} (average over {fmt.number(tokens)} tokens)"
    else:
        rate = f"{fmt.tok_rate(st.get('tokens_per_s'))} (last logged)"
        wall = st.get("elapsed_s")
    ckpt = next(
        ((e.get("detail") or {}).get("path") for e in reversed(events) if e.get("kind") == "checkpoint"), None
    )
    where = "" if host in (None, "local") else f"{host}:"
    code = st.get("exit_code")
    lines = [
        f"run {run} {st.get('state')}"
        + (f" (exit code {code})" if code not in (None, 0) else "")
        + f": step {fmt.step_total(st.get('step'), st.get('total_steps'))}, loss {fmt.loss(st.get('loss'))}, "
        f"{rate}, wall time {fmt.duration(wall)}",
        f"  checkpoint: {where}{st.get('run_dir')}/{ckpt}"
        if ckpt and st.get("run_dir")
        else "  checkpoint: none saved",
    ]
    if st.get("state") == "finished":
        cmds = [f"tunnel --run {run}", f"logs --run {run} -n 50", "runs"]
    else:
        cmds = [f"logs --run {run} -n 500", f"restart --run {run}", f"status --run {run}"]
    return "\n".join(lines) + "\nnext:\n" + "\n".join(f"  nsa-launch {c}" for c in cmds)


def next_steps(run: str, rented: bool = False) -> str:
    """One command a line: joined with `|` they read like a shell pipe. A run on a rented pod gets the
    command that ends the billing too: `kill` stops the trainer, not the pod."""
    cmds = [
        f"status --run {run}",
        f"logs -f --run {run}",
        f"tunnel --run {run}",
        f"kill --run {run}",
        "dashboard",
    ]
    if rented:
        cmds.append(
            f"pods down {run}      # pulls the newest checkpoint, then terminates the pod: billing ends"
        )
    return "next:\n" + "\n".join(f"  nsa-launch {c}" for c in cmds)


def keeps_going(run: str, host: str, what: str) -> str:
    """What Ctrl-C on a watching command leaves behind, and how to stop it."""
    return (
        f"{what}; run {run} keeps going on {host}. "
        f"Watch it: nsa-launch status --run {run}; stop it: nsa-launch kill --run {run}"
    )


TICK_PRINT_S = 5.0  # without a terminal, one ticker line per this many seconds


def wait_for_first_heartbeat(app: Application, rec: object, timeout: float | None = None) -> dict:
    """wait_first_heartbeat with a ticker: elapsed time, what it waits for, the last log line (a
    live status line on a terminal; a line every TICK_PRINT_S in a log)."""
    run = rec.run  # type: ignore[attr-defined]
    printed = [0.0]

    def line(elapsed: float, limit: float, last: str) -> str:
        return (
            f"waiting for the first heartbeat of {run}: {fmt.duration(elapsed)} (gives up at {fmt.duration(limit)}); "
            f"log: {last[:120] if last else '(nothing yet)'}"
        )

    if app.err.is_terminal:
        with app.err.status(f"waiting for the first heartbeat of {run}") as status:
            return wait_first_heartbeat(
                rec,
                timeout,
                on_tick=lambda e, lim, last: status.update(line(e, lim, last)),  # type: ignore[arg-type]
            )

    def tick(elapsed: float, limit: float, last: str) -> None:
        if elapsed - printed[0] >= TICK_PRINT_S:
            printed[0] = elapsed
            app.say(line(elapsed, limit, last))

    return wait_first_heartbeat(rec, timeout, on_tick=tick)  # type: ignore[arg-type]
