"""`nsa-launch pods ls | create | down`: Prime Intellect pods, and what they cost so far."""

from __future__ import annotations

import time

import click

from launcher.app import Application


def _client():
    from launcher.providers.prime import PrimeClient

    return PrimeClient()


@click.group()
def pods() -> None:
    """Rent and terminate Prime Intellect pods (PRIME_API_KEY; PRIME_API_BASE_URL for another API)."""


@pods.command("ls")
@click.option("--available", is_flag=True, help="List offers in stock instead of your pods.")
@click.option("--gpu-type", help="With --available: the GPU type (e.g. A100_80GB).")
@click.option("--count", default=1, show_default=True, help="With --available: GPUs per pod (all nodes').")
@click.option("--multi-node", "multinode", is_flag=True, help="With --available: multi-node cluster offers.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def ls(
    app: Application, available: bool, gpu_type: str | None, count: int, multinode: bool, as_json: bool
) -> None:
    """Your pods (id, GPUs, status, SSH, $/h, run and cost so far), or offers with --available."""
    from rich.table import Table

    from launcher.providers.pods import load_pod

    client = _client()
    if available:
        types = [gpu_type] if gpu_type else client.gpu_types()
        offers = [o for t in types for o in client.availability(t, count, multinode)]
        if as_json:
            app.emit_json([o.__dict__ for o in offers])
            return
        table = Table("gpu", "count", "$/h", "stock", "provider", "data center", "cloud id")
        for o in sorted(offers, key=lambda o: (o.gpu_type, o.price_hr or 0)):
            price = f"{o.price_hr:.2f}" if o.price_hr is not None else "-"
            table.add_row(o.gpu_type, str(o.gpu_count), price, o.stock_status, o.provider or "-",
                          o.data_center or "-", o.cloud_id)  # fmt: skip
        app.out.print(table)
        return
    rows = []
    for p in client.list_pods():
        rec = load_pod(p.id)
        cost = rec.cost() if rec else None
        rows.append({
            "id": p.id, "name": p.name, "gpu_type": p.gpu_type, "gpu_count": p.gpu_count,
            "status": p.status, "ssh": p.ssh, "price_hr": p.price_hr, "run": rec.run if rec else None,
            "cost_usd": round(cost, 4) if cost is not None else None, "created_at": p.created_at,
        })  # fmt: skip
    if as_json:
        app.emit_json(rows)
        return
    if not rows:
        app.say("no pods")
        return
    table = Table("id", "gpus", "status", "ssh", "$/h", "run", "cost so far")
    for r in rows:
        table.add_row(
            r["id"],
            f"{r['gpu_count']}x {r['gpu_type']}",
            r["status"],
            " | ".join(r["ssh"]) or "-",
            f"{r['price_hr']:.2f}" if r["price_hr"] is not None else "-",
            r["run"] or "-",
            f"${r['cost_usd']:.2f}" if r["cost_usd"] is not None else "- (not created by nsa-launch)",
        )
    app.out.print(table)


@pods.command()
@click.option("--profile", "-P", help="Profile whose GPUs per node to rent. Default: cpu.")
@click.option("--gpu-type", help="Prime GPU type (e.g. A100_80GB). Default: the profile's expect.gpu_name.")
@click.option("--name", help="Pod name. Default: nsa-<time>.")
@click.option("--ssh-config", type=click.Path(), help="OpenSSH config (key, known_hosts) for the pod.")
@click.option("--ready-timeout", default=900.0, show_default=True, help="Seconds to wait for SSH.")
@click.pass_obj
def create(
    app: Application,
    profile: str | None,
    gpu_type: str | None,
    name: str | None,
    ssh_config: str | None,
    ready_timeout: float,
) -> None:
    """Rent a pod, wait until SSH answers, print its SSH target (for `up --host`)."""
    from launcher.profiles import load_profile
    from launcher.providers.pods import provision

    prof = load_profile(profile)
    rec, _hosts = provision(
        _client(), prof, gpu_type, name or f"nsa-{time.strftime('%Y%m%d-%H%M%S')}", None, app.say,
        ready_timeout, ssh_config,
    )  # fmt: skip
    for s in rec.ssh:
        app.print(s)
    app.say(f"next: nsa-launch up --host '{rec.ssh[0]}' ... ; nsa-launch pods down {rec.id}")


@pods.command()
@click.argument("target")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-pull", is_flag=True, help="Do not pull the run's newest checkpoint first.")
@click.pass_obj
def down(app: Application, target: str, yes: bool, no_pull: bool) -> None:
    """Terminate a pod (TARGET: pod id or run name): pulls the run's newest checkpoint first."""
    from launcher import registry
    from launcher.errors import LaunchError
    from launcher.providers.pods import PodRecord, load_pod, pods_of_run, terminate

    client = _client()
    rec = load_pod(target)
    run = registry.load(target)
    if rec is None and run is not None:
        live = [p for p in pods_of_run(run.run) if p.terminated is None]
        if not live:
            raise LaunchError(f"run {target} has no live pod rented by nsa-launch", "`nsa-launch pods ls`")
        rec = live[-1]
    if rec is None:  # a pod nsa-launch did not create: still terminable by id
        pod = client.get_pod(target)
        rec = PodRecord(pod.id, None, pod.gpu_type, pod.gpu_count, pod.price_hr, time.time(), pod.ssh)
    from contextlib import nullcontext

    from launcher.locks import run_lock

    # one writer per run: not while a watch pulls into the mirror or replaces this pod
    with run_lock(rec.run, "nsa-launch pods down") if rec.run else nullcontext():
        if rec.run and not no_pull and registry.load(rec.run):
            from launcher.mirror import pull

            res = pull(registry.load(rec.run), say=app.say)  # type: ignore[arg-type]
            app.say(f"pulled {rec.run} to {res['mirror']}")
        if not yes:
            click.confirm(
                f"terminate pod {rec.id}" + (f" (run {rec.run})" if rec.run else "") + "?", abort=True
            )
        terminate(client, rec, app.say)
