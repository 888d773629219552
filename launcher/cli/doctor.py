"""`nsa-launch doctor`: check this machine and a host can run a profile, changing nothing.

Reports, per host, what a new user needs to know before the first `up`: which machine it checked,
the python (version, path), torch (version, build: CPU or CUDA), GPUs, free disk, tmux and rsync,
what `up` would do for the host env, and whether the project is synced there yet. Every problem is
listed with its own fix; nothing is started, synced or installed.
"""

from __future__ import annotations

import shutil

import click

from launcher.cli.app import Application
from launcher.core import format as fmt
from launcher.core.errors import EXIT_RUNTIME, LaunchError
from launcher.launch.hostenv import plan_env
from launcher.launch.plan import UpOptions, plan_run
from launcher.launch.preflight import preflight
from launcher.ssh.remote import agent_call, transport_for


@click.command()
@click.option("--profile", "-P", help="Profile to check against. Default: cpu.")
@click.option("--host", "hosts", multiple=True, help="Host target(s) as for `up`. Default: this machine.")
@click.option("--ssh-config", type=click.Path(), help="OpenSSH config file resolving --host aliases.")
@click.option("--python", help="Absolute path of the host's python.")
@click.option("--workdir", help="Project dir on an SSH host (relative: to its home).")
@click.option(
    "--accept-new-host-key",
    is_flag=True,
    help="Record an unknown host key (first contact only), as `up` does; compare its fingerprint first.",
)
@click.option(
    "--allreduce/--no-allreduce",
    default=None,
    help="Run the all-reduce preflight across every rank (default: with > 1 GPU or node).",
)
@click.pass_obj
def doctor(
    app: Application,
    profile: str | None,
    hosts: tuple[str, ...],
    ssh_config: str | None,
    python: str | None,
    workdir: str | None,
    accept_new_host_key: bool,
    allreduce: bool | None,
) -> None:
    """Validate the profile and its config locally, then check each host (read-only, except that
    --accept-new-host-key records a new host's key)."""
    problems: list[tuple[str, str]] = []

    def problem(message: str, fix: str, label: str = "FAIL") -> None:
        # Each problem is printed once, where it is found, with its fix; the end only counts them.
        app.say(f"{label} {message}" + (f"\n  fix: {fix}" if fix else ""))
        problems.append((message, fix))

    for tool in ("ssh", "rsync", "tmux"):
        ok = shutil.which(tool) is not None
        if ok:
            app.say(f"ok   local {tool}")
        elif tool == "tmux":
            app.say("--   local tmux: missing (needed only for runs on this machine)")
        else:
            problem(
                f"local {tool} is missing", "install it (sync falls back to sftp without rsync)", "MISSING"
            )
    plan = plan_run(
        UpOptions(
            profile=profile,
            hosts=list(hosts),
            ssh_config=ssh_config,
            python=python,
            workdir=workdir,
            name="doctor-check",
        )
    )
    prof = plan.profile
    app.say(f"ok   profile {prof.name} ({prof.device}), config {plan.config_path} [{plan.config_hash}]")
    for i, spec in enumerate(plan.hosts):
        where = "this machine (no --host given)" if spec.is_local else spec.label
        app.say(f"host {i}: {where}")
        try:
            t = transport_for(spec, accept_new_host_key=accept_new_host_key)
            facts = preflight(t, plan, i)
        except LaunchError as e:
            problem(e.message, e.fix)
            continue
        _report(app, plan, i, facts, problems)
        py = plan.pythons[i]
        if py and py != "venv" and facts.get("synced"):
            try:
                reply = agent_call(t, facts["workdir"], py, "status", {"runs": []}, timeout=30)
                app.say(f"ok   the agent answers ({len(reply['gpus'])} GPU(s))")
            except LaunchError as e:
                problem(f"the agent: {e.message}", e.fix)
    if not problems:
        for p in _allreduce(app, plan, allreduce):
            problems.append((p, ""))  # _allreduce printed it
    if problems:
        app.abort(f"doctor found {len(problems)} problem(s) (listed above)", code=EXIT_RUNTIME)
    app.say("all checks passed")


def _report(app: Application, plan, i: int, facts: dict, problems: list[tuple[str, str]]) -> None:
    probe = facts.get("probe") or {}
    py = probe.get("executable") or "?"
    app.say(f"ok   python {facts['python']} ({py})")
    torch, build = probe.get("torch"), probe.get("torch_build")
    if torch:
        kind = "CPU build" if build == "cpu" else f"CUDA build ({build})" if build else "unknown build"
        app.say(f"ok   torch {torch}, {kind}")
    else:
        app.say("--   torch: not installed in this python")
    gpus = facts.get("gpus") or []
    app.say(f"ok   {len(gpus)} GPU(s)" + (f": {', '.join(gpus)}" if gpus else ""))
    app.say(f"ok   {fmt.size(int(facts.get('free_kb') or 0) * 1024)} free at {facts.get('workdir')}")
    app.say(f"ok   tmux, rsync {'yes' if facts.get('rsync') else 'no (sync uses sftp)'}")
    named = plan.pythons[i] not in (None, "venv") or plan.hosts[i].is_local
    if not named:
        env_plan = plan_env(plan.profile.device, probe)
        app.say(f"ok   host env: a venv at {facts.get('workdir')}/.venv ({env_plan.describe()})")
    if not facts.get("synced") and not plan.hosts[i].is_local:
        app.say(f"--   the project is not synced to {facts.get('workdir')} yet (`up` syncs it)")


def _allreduce(app: Application, plan: object, allreduce: bool | None) -> list[str]:
    """The all-reduce preflight of `up`, on every host at once; [] or the one problem."""
    import sys

    from launcher.launch import netcheck
    from launcher.launch.preflight import preflight as pf

    if not (allreduce or (allreduce is None and netcheck.wanted(plan.profile))):  # type: ignore[attr-defined]
        return []
    ts, pys, wds = [], [], []
    for i, spec in enumerate(plan.hosts):  # type: ignore[attr-defined]
        t = transport_for(spec)
        py = plan.pythons[i] or (sys.executable if spec.is_local else None)  # type: ignore[attr-defined]
        if not py or py == "venv":
            return [f"{t.label}: the all-reduce check needs the host's python: pass --python (or `up` once)"]
        ts.append(t)
        pys.append(py)
        wds.append(pf(t, plan, i)["workdir"])  # type: ignore[arg-type]
    rdzv = None
    if plan.profile.nodes > 1:  # type: ignore[attr-defined]
        port = agent_call(ts[0], wds[0], pys[0], "free_port", {"start": 29400})["port"]
        rdzv = f"{ts[0].hostname}:{port}"
    try:
        r = netcheck.run_check(ts, pys, wds, plan.profile, plan.env, rdzv)  # type: ignore[attr-defined]
    except LaunchError as e:
        app.say(f"FAIL {e.render()}")
        return [e.message.splitlines()[0]]
    app.say("ok  " + netcheck.describe(r))
    return []
