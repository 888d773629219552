"""Which Prime Intellect offer a pod is rented from: the user's choice, checked against what is on sale.

Owns OfferChoice (the renting options of `up --provision`, `pods create` and `pods offers`: spot,
community cloud, price cap, region, provider, image, disk, team, SSH key) and the filtering of the
API's offers by it. The default takes on-demand secure-cloud offers only: a spot pod can be taken
back by the provider and a community-cloud pod runs on someone's own machine, so each is opted into.
A value no offer of these GPUs has (a region, provider, image, disk size, price cap) is bad input,
exit 2, found before anything is rented; an empty shelf is exit 1. Without --disk, an offer whose
default disk is under the profile's expect.min_free_disk_gb is left out, naming the --disk that takes
it (the host's disk check refused such a pod after the rent). It must not create pods or open
SSH connections (launcher/providers/pods.py does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from launcher.config.profiles import Profile
from launcher.core.errors import LaunchError, RuntimeFailure
from launcher.providers.prime import Offer, PrimeClient

OUT_OF_STOCK = ("", "unavailable", "out of stock")


@dataclass
class OfferChoice:
    """What the user allows nsa-launch to rent. None / False: the default (see the module docstring)."""

    spot: bool = False
    community: bool = False
    max_price: float | None = None  # $/h of the whole pod
    region: str | None = None  # the offer's region (e.g. eu_north) or data centre id (e.g. FIN-01)
    provider: str | None = None  # the offer's provider (e.g. datacrunch)
    image: str | None = None  # one of the offer's images (e.g. cuda_12_4_pytorch_2_5)
    disk: int | None = None  # GB, within the offer's disk range
    team: str | None = None  # team id; default PRIME_TEAM_ID / team_id of ~/.prime/config.json
    ssh_key_id: str | None = None  # one of the account's SSH keys (GET /ssh_keys/); default: the primary

    def flags(self) -> list[str]:
        """The options as they would be typed again (for messages and the pod ledger)."""
        out = ["--spot"] * self.spot + ["--community"] * self.community
        for opt, v in (("--max-price", self.max_price), ("--region", self.region), ("--provider", self.provider),
                       ("--image", self.image), ("--disk", self.disk), ("--team", self.team),
                       ("--ssh-key-id", self.ssh_key_id)):  # fmt: skip
            if v is not None:
                out += [opt, str(v)]
        return out


@dataclass
class Shelf:
    """The in-stock offers of the profile's GPUs: those the choice takes (cheapest first) and the rest
    with the reason each was left out."""

    what: str
    taken: list[Offer] = field(default_factory=list)
    left: list[tuple[Offer, str]] = field(default_factory=list)


def gpu_type_for(client: PrimeClient, profile: Profile, gpu_type: str | None) -> list[str]:
    """The GPU types to consider: --gpu-type (checked against the API), else the profile's gpu_name."""
    known = client.gpu_types()
    if gpu_type:
        if gpu_type not in known:
            raise LaunchError(
                f"--gpu-type {gpu_type!r} is not a Prime Intellect GPU type",
                f"use one of: {', '.join(known)}",
            )
        return [gpu_type]
    want = profile.expect.gpu_name
    if not want:
        raise LaunchError(
            f"profile {profile.name} names no GPU (expect.gpu_name), so there is nothing to rent by default",
            f"pass --gpu-type (one of: {', '.join(known)})",
        )
    matches = [t for t in known if want.lower() in t.lower()]
    if not matches:
        raise LaunchError(
            f"no Prime Intellect GPU type matches the profile's expect.gpu_name {want!r}",
            f"pass --gpu-type (one of: {', '.join(known)})",
        )
    return matches


def _left_out(o: Offer, c: OfferChoice, need: float = 0.0) -> str | None:
    if o.is_spot and not c.spot:
        return "spot (--spot)"
    if o.community and not c.community:
        return "community cloud (--community)"
    if c.region and c.region.lower() not in {(o.region or "").lower(), (o.data_center or "").lower()}:
        return f"not in {c.region}"
    if c.provider and (o.provider or "").lower() != c.provider.lower():
        return f"not from {c.provider}"
    if c.image and c.image not in o.images:
        return f"no image {c.image}"
    if c.disk is not None and not _disk_fits(o, c.disk):
        return f"disk {o.disk_min}-{o.disk_max} GB"
    if c.disk is None and need:
        short = _short_disk(o, need)
        if short:
            return short
    if c.max_price is not None and (o.price_hr is None or o.price_hr > c.max_price):
        return f"over ${c.max_price:g}/h"
    return None


def _short_disk(o: Offer, need: float) -> str | None:
    """Why an offer's disk cannot hold the profile's expect.min_free_disk_gb without --disk, or None.
    Its default disk (GpuAvailability disk.defaultCount, what the pod gets when no --disk is given) was
    not checked: such a pod was rented, then refused by the host's disk check (billed, nothing run).
    Skipped, not given more disk unasked: the image takes an unknown part of the disk (a pod asked for
    exactly the need would still fail the check) and disk above the default may be priced on top of the
    offer's $/h (disk.pricePerUnit, defaultIncludedInPrice), so the size is the user's to choose."""
    if o.disk_max is not None and o.disk_max < need:
        return f"disk at most {o.disk_max} GB, under the profile's {need:g} GB"
    if o.disk_default is not None and o.disk_default < need:
        least = max(math.ceil(need), o.disk_min or 0)
        return f"default disk {o.disk_default} GB, under the profile's {need:g} GB (--disk {least} or more)"
    return None


def _disk_fits(o: Offer, disk: int) -> bool:
    return (o.disk_min is None or disk >= o.disk_min) and (o.disk_max is None or disk <= o.disk_max)


def _check_values(c: OfferChoice, offers: list[Offer], what: str) -> None:
    """Each value against every in-stock offer of these GPUs: one no offer has is bad input (exit 2)."""

    def refuse(opt: str, value: object, have: set[str]) -> None:
        raise LaunchError(
            f"{opt} {value} matches no offer of {what}",
            f"use one of: {', '.join(sorted(have))} (`nsa-launch pods offers` lists them)",
        )

    places = {x for o in offers for x in (o.region, o.data_center) if x}
    if c.region and c.region.lower() not in {p.lower() for p in places}:
        refuse("--region", c.region, places)
    providers = {o.provider for o in offers if o.provider}
    if c.provider and c.provider.lower() not in {p.lower() for p in providers}:
        refuse("--provider", c.provider, providers)
    images = {i for o in offers for i in o.images}
    if c.image and c.image not in images:
        refuse("--image", c.image, images)
    if c.disk is not None and not any(_disk_fits(o, c.disk) for o in offers):
        ranges = {f"{o.disk_min}-{o.disk_max} GB ({o.provider})" for o in offers}
        raise LaunchError(
            f"--disk {c.disk} fits no offer of {what}", f"use a size within {', '.join(sorted(ranges))}"
        )
    priced = [o for o in offers if o.price_hr is not None]
    if c.max_price is not None and priced and not any(o.price_hr <= c.max_price for o in priced):  # type: ignore[operator]
        cheapest = min(priced, key=lambda o: o.price_hr)  # type: ignore[arg-type,return-value]
        raise LaunchError(
            f"--max-price {c.max_price:g}: no offer of {what} costs that little; the cheapest is "
            f"${cheapest.price_hr:.2f}/h ({describe(cheapest)})",
            "raise --max-price, or rent fewer/other GPUs (--gpu-type)",
        )


def describe(o: Offer) -> str:
    """provider, region/data centre, security, spot: the words a user compares offers by."""
    cloud = "community cloud" if o.community else "secure cloud"
    return f"{o.provider or '?'} {o.where}, {cloud}, {'spot' if o.is_spot else 'on-demand'}"


def shelf(client: PrimeClient, profile: Profile, gpu_type: str | None, choice: OfferChoice) -> Shelf:
    """Every in-stock offer of the profile's GPUs (per node for one node; for N nodes the multi-node
    offers, whose gpuCount is the total, as `prime` lists them), split by the choice. No stock at
    all: RuntimeFailure (exit 1); a value no offer has: LaunchError (exit 2)."""
    need = profile.expect.min_free_disk_gb
    if choice.disk is not None and need and choice.disk < need:
        # the pod's preflight would refuse it (free disk < the profile's need) after it was rented
        raise LaunchError(
            f"--disk {choice.disk} GB is less than profile {profile.name}'s expect.min_free_disk_gb "
            f"({need:g} GB): `up` would stop at the pod's disk check after renting it",
            f"pass --disk above {need:g} (the image takes part of the disk too), or lower "
            "expect.min_free_disk_gb in the profile",
        )
    types = gpu_type_for(client, profile, gpu_type)
    multinode = profile.nodes > 1
    count = profile.nproc_per_node * profile.nodes
    what = f"{count}x {' or '.join(types)}"
    if multinode:
        what = f"a multi-node cluster of {what} ({profile.nodes} nodes x {profile.nproc_per_node})"
    offers = [o for t in types for o in client.availability(t, count, multinode) if o.gpu_count == count]
    offers = [o for o in offers if o.stock_status.lower() not in OUT_OF_STOCK]
    if not offers:
        raise RuntimeFailure(
            f"no Prime Intellect offer has {what} in stock now",
            "try another --gpu-type (`nsa-launch pods ls --available --gpu-type T"
            + (f" --count {count} --multi-node" if multinode else "")
            + "`), or later",
        )
    _check_values(choice, offers, what)
    out = Shelf(what)
    for o in offers:
        why = _left_out(o, choice, need or 0.0)
        if why:
            out.left.append((o, why))
        else:
            out.taken.append(o)
    out.taken.sort(key=lambda o: o.price_hr if o.price_hr is not None else float("inf"))
    return out


def choose_offer(
    client: PrimeClient, profile: Profile, gpu_type: str | None, choice: OfferChoice | None = None
) -> Offer:
    """The cheapest in-stock offer the choice takes. Offers exist but the options leave none: exit 2,
    naming what each was left out for and the option that would take it."""
    s = shelf(client, profile, gpu_type, choice or OfferChoice())
    if s.taken:
        return s.taken[0]
    reasons: dict[str, int] = {}
    for _o, why in s.left:
        reasons[why] = reasons.get(why, 0) + 1
    listed = "; ".join(f"{n} {why}" for why, n in reasons.items())
    raise LaunchError(
        f"{len(s.left)} offer(s) of {s.what} are in stock but the options leave none: {listed}",
        "add the option named in brackets to take those offers, or loosen the others (`nsa-launch pods offers`)",
    )


def check_ssh_key(client: PrimeClient, key_id: str) -> None:
    """--ssh-key-id must be one of the account's keys (GET /ssh_keys/): exit 2 before renting."""
    keys = client.ssh_keys()
    if key_id not in {k.get("id") for k in keys}:
        have = (
            ", ".join(f"{k.get('id')} ({k.get('name')})" for k in keys) or "none: upload one in the web app"
        )
        raise LaunchError(
            f"--ssh-key-id {key_id} is not one of this account's SSH keys", f"use one of: {have}"
        )
