"""`nsa-launch doctor`: check this machine and (optionally) a host can run a profile, changing nothing."""

from __future__ import annotations

import shutil

import click

from launcher.app import Application
from launcher.errors import EXIT_RUNTIME, LaunchError
from launcher.launch.plan import UpOptions, plan_run
from launcher.launch.preflight import preflight
from launcher.remote import agent_call, transport_for


@click.command()
@click.option("--profile", "-P", help="Profile to check against. Default: cpu.")
@click.option("--host", "hosts", multiple=True, help="Host target(s) as for `up`.")
@click.option("--ssh-config", type=click.Path(), help="OpenSSH config file resolving --host aliases.")
@click.option("--python", help="Absolute path of the host's python.")
@click.option("--workdir", help="Project dir on the host.")
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
    allreduce: bool | None,
) -> None:
    """Validate the profile and its config locally, then preflight each host (read-only)."""
    problems = []
    for tool in ("ssh", "rsync", "tmux"):
        ok = shutil.which(tool) is not None
        app.say(f"{'ok ' if ok else 'MISSING'} local {tool}")
        if not ok and tool != "tmux":
            problems.append(f"local {tool} missing (sync falls back to sftp)" if tool == "rsync" else tool)
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
    app.say(f"ok  profile {plan.profile.name}, config {plan.config_path} [{plan.config_hash}]")
    for i, spec in enumerate(plan.hosts):
        try:
            t = transport_for(spec)
            facts = preflight(t, plan, i)
            app.say(
                f"ok  {t.label}: python {facts['python']}, tmux, {len(facts['gpus'])} GPU(s), "
                f"rsync {'yes' if facts.get('rsync') else 'no (sftp fallback)'}, workdir {facts['workdir']}"
            )
            py = plan.pythons[i]
            if py and py != "venv":
                reply = agent_call(t, facts["workdir"], py, "status", {"runs": []}, timeout=30)
                app.say(f"ok  agent answers on {t.label} ({len(reply['gpus'])} GPU(s) via nvidia-smi)")
        except LaunchError as e:
            app.say(f"FAIL {spec.label}: {e.render()}")
            problems.append(e.message)
    if not problems:
        problems += _allreduce(app, plan, allreduce)
    if problems:
        app.abort(
            "doctor found problems: " + "; ".join(problems),
            "fix them and run doctor again",
            code=EXIT_RUNTIME,
        )
    app.say("all checks passed")


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
