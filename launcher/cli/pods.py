"""`nsa-launch pods ls | offers | create | down`: Prime Intellect pods, the offers, and what they cost so far.

Also owns the renting options shared with `up --provision prime` (offer_options / choice_from).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from launcher.cli.app import Application, Price, Seconds


def _client():
    from launcher.providers.prime import PrimeClient

    return PrimeClient()


def ready_timeout_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--ready-timeout` of `pods create` and `up --provision`: one option, one check (a finite number
    of seconds above 0: both took nan, and 0 rented a pod only to give up on it). The default is
    launcher.providers.pods.READY_TIMEOUT_S, not imported here to keep the CLI's start light."""
    return click.option(
        "--ready-timeout", default=900.0, show_default=True, type=Seconds(min=0.0, min_open=True), help=help
    )


def offer_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The renting options: which offers may be taken and what the pod gets (launcher/providers/offers.py)."""
    opts = [
        click.option("--spot", is_flag=True, help="Also take spot offers (cheaper; the provider may take the pod back)."),
        click.option("--community", is_flag=True, help="Also take community-cloud offers (someone's own machines)."),
        click.option("--max-price", type=Price(min=0, min_open=True), help="Cap in $/h for the whole pod."),
        click.option("--region", help="Only offers in this region (e.g. eu_north) or data centre (e.g. FIN-01)."),
        click.option("--provider", "provider_name", help="Only offers of this provider (e.g. datacrunch)."),
        click.option("--image", help="Pod image, one the offer lists (default: the offer's first)."),
        click.option("--disk", type=click.IntRange(min=1), help="Disk in GB, within the offer's range and at least the profile's expect.min_free_disk_gb (default: the offer's; an offer whose default is under that is left out)."),
        click.option("--team", help="Team id to bill (default: PRIME_TEAM_ID, else team_id in ~/.prime/config.json)."),
        click.option("--ssh-key-id", help="Account SSH key id for the pod (default: your primary key)."),
    ]  # fmt: skip
    for opt in reversed(opts):
        f = opt(f)
    return f


OFFER_KEYS = (
    "spot",
    "community",
    "max_price",
    "region",
    "provider_name",
    "image",
    "disk",
    "team",
    "ssh_key_id",
)


def choice_from(kw: dict[str, Any]) -> Any:
    """Pop the renting options out of a command's keyword arguments into an OfferChoice."""
    from launcher.providers.offers import OfferChoice

    v = {k: kw.pop(k, None) for k in OFFER_KEYS}
    v["provider"] = v.pop("provider_name")
    v["spot"], v["community"] = bool(v["spot"]), bool(v["community"])
    return OfferChoice(**v)


def print_offers(
    app: Application, client: Any, profile: Any, gpu_type: str | None, choice: Any, as_json: bool
) -> None:
    """The candidate offers, the one that would be rented first, and why the others are left out."""
    from rich.table import Table

    from launcher.providers.offers import describe, shelf

    s = shelf(client, profile, gpu_type, choice)
    rows = [(o, "rent" if i == 0 else "ok") for i, o in enumerate(s.taken)] + list(s.left)
    if as_json:
        app.emit_json([{**o.__dict__, "choice": why} for o, why in rows])
        return
    # provider, place, security and spot side by side: the four things the options choose by
    table = Table("", "gpus", "$/h", "provider", "region/dc", "kind", "stock", "why not")
    for o, why in rows:
        price = f"{o.price_hr:.2f}" if o.price_hr is not None else "-"
        kind = f"{'community' if o.community else 'secure'} {'spot' if o.is_spot else 'on-demand'}"
        table.add_row("->" if why == "rent" else "", f"{o.gpu_count}x {o.gpu_type}", price, o.provider or "-",
                      o.where, kind, o.stock_status, "" if why in ("rent", "ok") else why)  # fmt: skip
    app.out.print(table)
    if s.taken:
        o = s.taken[0]
        app.say(f"would rent {o.gpu_count}x {o.gpu_type} from {describe(o)} at ${o.price_hr or 0:.2f}/h")
    else:
        app.say("no offer passes the options; the `why not` column names the option that would take each")


@click.group()
def pods() -> None:
    """Rent and terminate Prime Intellect pods (PRIME_API_KEY or ~/.prime/config.json)."""


@pods.command("ls")
@click.option("--all", "show_all", is_flag=True, help="Every pod of the account, not only nsa-launch's.")
@click.option("--available", is_flag=True, help="List offers in stock instead of your pods.")
@click.option("--gpu-type", help="With --available: the GPU type (e.g. A100_80GB).")
@click.option("--count", default=1, show_default=True, help="With --available: GPUs per pod (all nodes').")
@click.option("--multi-node", "multinode", is_flag=True, help="With --available: multi-node cluster offers.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def ls(
    app: Application,
    show_all: bool,
    available: bool,
    gpu_type: str | None,
    count: int,
    multinode: bool,
    as_json: bool,
) -> None:
    """nsa-launch's pods (id, name, GPUs, status, SSH, $/h, run, cost so far); --all: the account's.
    A pod of the ledger the API says is terminated (in the web app) is ended in the ledger, said once."""
    from rich.table import Table

    from launcher.providers.pods import live_pods, load_pod, settle_gone
    from launcher.providers.prime import POD_NAME_PREFIX

    client = _client()
    if available:
        types = [gpu_type] if gpu_type else client.gpu_types()
        offers = [o for t in types for o in client.availability(t, count, multinode)]
        if as_json:
            app.emit_json([o.__dict__ for o in offers])
            return
        table = Table("gpu", "count", "$/h", "stock", "provider", "region/dc", "security", "spot", "cloud id")
        for o in sorted(offers, key=lambda o: (o.gpu_type, o.price_hr or 0)):
            price = f"{o.price_hr:.2f}" if o.price_hr is not None else "-"
            table.add_row(o.gpu_type, str(o.gpu_count), price, o.stock_status, o.provider or "-", o.where,
                          "community" if o.community else "secure", "spot" if o.is_spot else "-", o.cloud_id)  # fmt: skip
        app.out.print(table)
        return
    rows = []
    hidden = 0
    listed = client.list_pods()
    # a ledger pod the API lists as TERMINATED, or no longer lists and answers 404 for (terminated in
    # the web app): ended in the ledger, said once; its cost grew on in `pods ls` and `status` before
    for line in settle_gone(live_pods(), client, {p.id: p for p in listed}):
        app.say(line)
    for p in listed:
        rec = load_pod(p.id)
        # ours: in this machine's ledger; named with the prefix: made by nsa-launch (maybe elsewhere)
        ours = rec is not None or (p.name or "").startswith(POD_NAME_PREFIX)
        if not (ours or show_all):
            hidden += 1
            continue
        cost = rec.cost() if rec else None
        rows.append({
            "id": p.id, "name": p.name, "gpu_type": p.gpu_type, "gpu_count": p.gpu_count,
            "status": p.status, "ssh": p.ssh, "price_hr": p.price_hr, "run": rec.run if rec else None,
            "cost_usd": round(cost, 4) if cost is not None else None, "created_at": p.created_at,
            "nsa_launch": ours, "in_ledger": rec is not None,
        })  # fmt: skip
    if as_json:
        app.emit_json(rows)
    elif not rows:
        app.say("no pods of nsa-launch")
    if as_json or not rows:
        if hidden:
            app.say(
                f"{hidden} other pod(s) of the account not made by nsa-launch: `nsa-launch pods ls --all`"
            )
        return
    table = Table("id", "name", "gpus", "status", "ssh", "$/h", "run", "cost so far")
    for r in rows:
        table.add_row(
            r["id"],
            r["name"] or "-",
            f"{r['gpu_count']}x {r['gpu_type']}",
            r["status"],
            " | ".join(r["ssh"]) or "-",
            f"{r['price_hr']:.2f}" if r["price_hr"] is not None else "-",
            r["run"] or "-",
            f"${r['cost_usd']:.2f}" if r["cost_usd"] is not None else "- (not in this machine's ledger)",
        )
    app.out.print(table)
    if hidden:
        app.say(f"{hidden} other pod(s) of the account not made by nsa-launch: `nsa-launch pods ls --all`")


@pods.command()
@click.option("--profile", "-P", help="Profile whose GPUs to rent (nodes x nproc_per_node). Default: cpu.")
@click.option("--gpu-type", help="Prime GPU type (e.g. A100_80GB). Default: the profile's expect.gpu_name.")
@offer_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def offers(app: Application, profile: str | None, gpu_type: str | None, as_json: bool, **kw: Any) -> None:
    """The offers `up --provision prime` would choose from with these options, cheapest first."""
    from launcher.config.profiles import load_profile

    choice = choice_from(kw)
    client = _client()
    if choice.ssh_key_id:
        from launcher.providers.offers import check_ssh_key

        check_ssh_key(client, choice.ssh_key_id)
    print_offers(app, client, load_profile(profile), gpu_type, choice, as_json)


@pods.command()
@click.option("--profile", "-P", help="Profile whose GPUs per node to rent. Default: cpu.")
@click.option("--gpu-type", help="Prime GPU type (e.g. A100_80GB). Default: the profile's expect.gpu_name.")
@click.option("--name", help="Pod name after the nsa- prefix (letters, digits, dashes). Default: <time>.")
@click.option("--ssh-config", type=click.Path(), help="OpenSSH config (key, known_hosts) for the pod.")
@ready_timeout_option("Seconds to wait for SSH.")
@offer_options
@click.pass_obj
def create(
    app: Application,
    profile: str | None,
    gpu_type: str | None,
    name: str | None,
    ssh_config: str | None,
    ready_timeout: float,
    **kw: Any,
) -> None:
    """Rent a pod, wait until SSH answers, print its SSH target (for `up --host`)."""
    from launcher.config.profiles import load_profile
    from launcher.providers.pods import provision

    choice = choice_from(kw)
    prof = load_profile(profile)
    rec, _hosts = provision(
        _client(), prof, gpu_type, name or time.strftime("%Y%m%d-%H%M%S"), None, app.say, ready_timeout,
        ssh_config, choice=choice,
    )  # fmt: skip
    for s in rec.ssh:
        app.print(s)
    app.say(f"next: nsa-launch up --host '{rec.ssh[0]}' ... ; nsa-launch pods down {rec.id}")


@pods.command()
@click.argument("target")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-pull", is_flag=True, help="Do not pull the run's newest checkpoint first.")
@click.option(
    "--force", is_flag=True, help="Also terminate a pod nsa-launch did not create (no cost is recorded)."
)
@click.pass_obj
def down(app: Application, target: str, yes: bool, no_pull: bool, force: bool) -> None:
    """Terminate a pod (TARGET: pod id), or every live pod of a run (TARGET: run name); pulls the
    run's newest checkpoint first. A pod already terminated is left alone (its cost is not counted again)."""
    from launcher.core.errors import LaunchError
    from launcher.providers.pods import load_pod, pods_dir, pods_of_run, settle_gone, terminate
    from launcher.run import registry

    client = _client()
    rec = load_pod(target)
    recs = [rec] if rec is not None else pods_of_run(target)  # the ledger knows the run even if `up` died
    if not recs:
        pod = client.get_pod(target)  # not ours: 404 says so; a foreign pod needs --force
        if not force:
            raise LaunchError(
                f"pod {pod.id} ({pod.name or 'no name'}, {pod.status}) was not created by nsa-launch on this "
                f"machine (not in {pods_dir()}) and is no run's",
                "terminate it where it was made (`prime pods terminate`, the web app), or add --force",
            )
        if not yes:
            click.confirm(
                f"terminate pod {pod.id} ({pod.name}), which nsa-launch did not create?", abort=True
            )
        client.delete_pod(pod.id)
        app.say(f"terminated pod {pod.id} (not nsa-launch's: no cost recorded)")
        return
    # one terminated in the web app has nothing to pull from or delete: ended in the ledger, said
    was_live = {r.id for r in recs if r.terminated is None}
    for line in settle_gone(recs, client):
        app.say(line)
    live = [r for r in recs if r.terminated is None]
    for r in recs:
        if r.terminated is not None and (rec is not None or not live) and r.id not in was_live:
            terminate(client, r, app.say)  # says "already terminated" with its cost; changes nothing
    if not live:
        return
    run = live[0].run
    from contextlib import nullcontext

    from launcher.run.locks import run_lock

    # one writer per run: not while a watch pulls into the mirror or replaces this pod
    with run_lock(run, "nsa-launch pods down") if run else nullcontext():
        if run and not no_pull and registry.load(run):
            from launcher.recover.mirror import pull

            res = pull(registry.load(run), say=app.say)  # type: ignore[arg-type]
            app.say(f"pulled {run} to {res['mirror']}")
        if not yes:
            ids = ", ".join(r.id for r in live)
            click.confirm(f"terminate pod {ids}" + (f" (run {run})" if run else "") + "?", abort=True)
        for r in live:
            terminate(client, r, app.say)
