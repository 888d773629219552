"""Renting a pod for a run: create, wait until SSH answers, terminate; the local pod ledger.

Owns renting a pod from the offer launcher/providers/offers.py chose and recording it in the ledger
($NSA_LAUNCH_HOME/pods/<id>.json: run, name, price, times, the options it was rented with) the moment
the API returns its id, before any wait; the wait for it (ACTIVE with an SSH string and a finished
installation, then an SSH banner on that port; progress with elapsed time; a pod that goes ERROR,
STOPPED, DELETING, TERMINATED or fails its installation ends the wait at the next poll with the API's
own failure text; UNKNOWN is borne for a bounded time; a timeout names what it waited for);
terminating a pod it created when a later step fails, Ctrl-C, SIGTERM and SIGHUP included (nothing
left billing), once (the cost is counted once); recording a new pod's host key and forgetting a
terminated pod's; the cost so far that status shows; and a pod terminated outside nsa-launch (the
web app) marked ended when the API is next asked about it and says so (`settle_gone`: `pods ls`,
`pods down`, a provisioned run's `status`). It must not start runs (launcher/launch does) or import
torch.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher.config.profiles import Profile
from launcher.core.errors import LaunchError, RuntimeFailure
from launcher.core.signals import signals_as_interrupt
from launcher.providers.offers import OfferChoice, check_ssh_key, choose_offer, describe, gpu_type_for
from launcher.providers.prime import TERMINATED, UNKNOWN, Pod, PrimeAPIError, PrimeClient, pod_name
from launcher.run import registry
from launcher.ssh.hosts import HostSpec, parse_target

READY_TIMEOUT_S = 900.0
POLL_S = 2.0
UNKNOWN_GRACE_S = 120.0  # an UNKNOWN status (the API lost track for a while) is borne this long
TRANSIENT_S = 60.0  # 5xx / 429 / no network while polling are retried this long
__all__ = ["OfferChoice", "choose_offer", "gpu_type_for"]  # re-exported: callers import them from here


@dataclass
class PodRecord:
    """A pod nsa-launch created: kept after termination so the cost stays known."""

    id: str
    run: str | None
    gpu_type: str
    gpu_count: int
    price_hr: float | None
    created: float
    ssh: list[str]
    terminated: float | None = None
    ssh_config: str | None = None  # the --ssh-config the pod was reached with (its known_hosts)
    name: str | None = None  # as the API knows it (POD_NAME_PREFIX + the run or --name)
    choice: dict[str, Any] | None = None  # the OfferChoice it was rented with (a replacement reuses it)
    offer: str | None = None  # provider, region, security, spot of the offer

    def cost(self, now: float | None = None) -> float | None:
        if self.price_hr is None:
            return None
        end = self.terminated or (time.time() if now is None else now)
        return self.price_hr * max(0.0, end - self.created) / 3600.0


def pods_dir() -> Path:
    return registry.home() / "pods"


def save_pod(rec: PodRecord) -> None:
    from nsa.runfiles import atomic_write_json

    atomic_write_json(pods_dir() / f"{rec.id}.json", asdict(rec))


def load_pod(pod_id: str) -> PodRecord | None:
    try:
        return PodRecord(**json.loads((pods_dir() / f"{pod_id}.json").read_text()))
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        return None


def pods_of_run(run: str) -> list[PodRecord]:
    out = []
    if pods_dir().is_dir():
        for p in pods_dir().glob("*.json"):
            rec = load_pod(p.stem)
            if rec and rec.run == run:
                out.append(rec)
    return sorted(out, key=lambda r: r.created)


def live_pods() -> list[PodRecord]:
    """Every pod of the ledger not yet terminated (as far as this machine knows)."""
    recs = [load_pod(p.stem) for p in sorted(pods_dir().glob("*.json"))] if pods_dir().is_dir() else []
    return [r for r in recs if r is not None and r.terminated is None]


def run_cost(run: str) -> dict[str, Any] | None:
    """Pod id, $/hour and dollars so far of a provisioned run (every pod it used), or None. A live pod
    the API says is gone (terminated in the web app) is marked ended first (`settle_gone`), at most once
    a CHECK_EVERY_S per pod in a process: its cost grew forever in `status`, `runs` and the dashboard.
    `gone` holds what was seen, the one time it is seen."""
    recs = pods_of_run(run)
    if not recs:
        return None
    gone = settle_gone([r for r in recs if _due(r)], _quiet_client)
    costs = [r.cost() for r in recs]
    live = [r for r in recs if r.terminated is None]
    cur = live[-1] if live else recs[-1]
    return {
        "pod_id": cur.id,
        "price_hr": cur.price_hr,
        "cost_usd": round(sum(c for c in costs if c is not None), 4)
        if any(c is not None for c in costs)
        else None,
        "pods": len(recs),
        "terminated": not live,
        "gone": gone,
    }


# --- pods terminated outside nsa-launch -------------------------------------------------------------
CHECK_EVERY_S = 30.0  # `status` in a loop (`up --wait` polls it every second, the dashboard) asks this seldom
STATUS_TIMEOUT_S = 5.0  # a status must not wait the API's 30 s when it is down: it shows the ledger's cost
_checked: dict[str, float] = {}  # pod id -> time.monotonic() of the last question, in this process


def _due(rec: PodRecord) -> bool:
    if rec.terminated is not None:
        return False
    last = _checked.get(rec.id)
    if last is not None and time.monotonic() - last < CHECK_EVERY_S:
        return False
    _checked[rec.id] = time.monotonic()
    return True


def _quiet_client() -> PrimeClient | None:
    """A client for a status's question, or None when there is none to ask (no key, a config the
    `prime` CLI wrote wrong): status shows the ledger's cost then, as it did."""
    try:
        return PrimeClient(timeout=STATUS_TIMEOUT_S)
    except LaunchError:
        return None


def api_says_gone(client: PrimeClient, pod_id: str, listed: Pod | None = None) -> str | None:
    """The API's word that a pod has ended: `TERMINATED` (APIPodConfig.status), or a 404 on GET
    /pods/{id} (the `prime` CLI's NotFoundError: a terminated pod leaves the list for /pods/history).
    None when it is still there in any other state (STOPPED, ERROR may still bill: `pods down` ends
    them) or the API cannot say now (a 5xx, no network: nothing is changed on a maybe)."""
    pod = listed
    if pod is None:
        try:
            pod = client.get_pod(pod_id)
        except PrimeAPIError as e:
            return "the API no longer knows it (HTTP 404)" if e.status == 404 else None
        except LaunchError:
            return None
    return f"the API says {TERMINATED}" if pod.status == TERMINATED else None


def settle_gone(
    recs: list[PodRecord],
    client: PrimeClient | Callable[[], PrimeClient | None] | None,
    listed: dict[str, Pod] | None = None,
) -> list[str]:
    """Mark the live ledger records of pods the API says are gone (terminated outside nsa-launch: the
    web app, `prime pods terminate`, the provider) as ended at the time they were seen gone, and forget
    their host keys, as `terminate` does. `listed`: the account's pods as `GET /pods/` just listed them
    (a pod absent from it is asked about by id). Returns one line per pod marked: said once, since an
    ended record is not asked about again. `client` may be a factory, called only when a pod is due."""
    out: list[str] = []
    live = [r for r in recs if r.terminated is None]
    if not live:
        return out
    if client is not None and not isinstance(client, PrimeClient):
        client = client()
    if client is None:
        return out
    for rec in live:
        why = api_says_gone(client, rec.id, (listed or {}).get(rec.id))
        if why is None:
            continue
        rec.terminated = time.time()
        save_pod(rec)
        for s in rec.ssh:
            forget_host_key(s, rec.ssh_config)
        cost = rec.cost()
        when = time.strftime("%H:%M:%S", time.localtime(rec.terminated))
        out.append(
            f"pod {rec.id}"
            + (f" (run {rec.run})" if rec.run else "")
            + f" was terminated outside nsa-launch "
            f"({why}): the ledger ends it at {when}, when it was seen gone (it may have ended before)"
            + (f", cost ${cost:.2f}" if cost is not None else "")
            + "; it bills no more"
        )
    return out


def still_billing(run: str) -> str | None:
    """What `kill` says of a provisioned run: its pods that bill on (the ledger's live ones), or None.
    `kill` stops the trainer only, so the run's checkpoints stay on the pod for `pods down` to pull."""
    live = [r for r in pods_of_run(run) if r.terminated is None]
    if not live:
        return None
    each = []
    for r in live:
        price = f" at ${r.price_hr:.2f}/h" if r.price_hr is not None else ""
        cost = r.cost()
        each.append(f"pod {r.id}{price}" + (f" (${cost:.2f} so far)" if cost is not None else ""))
    return (
        f"{', '.join(each)} still billing: kill stops the trainer, not the pod. "
        f"`nsa-launch pods down {run}` pulls the newest checkpoint and terminates it"
    )


def _poll(client: PrimeClient, pod: Pod, since: list[float | None]) -> Pod:
    """GET the pod; a 5xx, a 429 or a network error is retried for TRANSIENT_S (`since` holds when the
    current run of failures began), anything else raised."""
    try:
        new = client.get_pod(pod.id)
    except LaunchError as e:
        # an HTTP error is PrimeAPIError (5xx and 429 pass); no network at all, or an unreadable
        # answer (MalformedAnswer), is a bare RuntimeFailure
        if not _passing(e):
            raise
        since[0] = since[0] if since[0] is not None else time.monotonic()
        if time.monotonic() - since[0] > TRANSIENT_S:
            raise
        return pod
    since[0] = None
    return new


def wait_ready(
    client: PrimeClient,
    pod: Pod,
    say: Callable[[str], None],
    timeout: float = READY_TIMEOUT_S,
    ssh_config: str | None = None,
    nodes: int = 1,
    unknown_grace: float | None = None,
) -> tuple[Pod, list[HostSpec]]:
    """Poll until the pod is ACTIVE with an SSH string per node and sshd answers on every one.
    A pod that will not come up (Pod.failed) or stays UNKNOWN past `unknown_grace` raises at once with
    the API's words; one with another number of nodes than the profile's is an error too (exit 1)."""
    unknown_grace = UNKNOWN_GRACE_S if unknown_grace is None else unknown_grace
    t0 = time.monotonic()
    last_say = 0.0
    unknown_since: float | None = None
    failing: list[float | None] = [None]
    waiting_for = f"pod {pod.id} to become ACTIVE"
    while True:
        elapsed = time.monotonic() - t0
        if elapsed > timeout:
            raise RuntimeFailure(
                f"gave up after {timeout:.0f} s waiting for {waiting_for} (last status {pod.status})",
                "try again, another --gpu-type, or a longer --ready-timeout",
            )
        if elapsed - last_say >= 5.0:
            inst = f", installation {pod.installation_status}" if pod.installation_status else ""
            say(f"  waiting for {waiting_for} ({elapsed:.0f} s, status {pod.status}{inst})")
            last_say = elapsed
        pod = _poll(client, pod, failing)
        why = pod.failed
        if why:
            raise RuntimeFailure(
                f"pod {pod.id} {why} (after {elapsed:.0f} s of starting)",
                "try again, or another offer: --provider / --region / --image (`nsa-launch pods offers`)",
            )
        if pod.status == UNKNOWN:
            unknown_since = unknown_since if unknown_since is not None else time.monotonic()
            if time.monotonic() - unknown_since > unknown_grace:
                raise RuntimeFailure(
                    f"pod {pod.id} has been UNKNOWN to the API for {unknown_grace:.0f} s",
                    "try again, or another --provider (`nsa-launch pods offers`)",
                )
        else:
            unknown_since = None
        if len(pod.ssh) > nodes:
            raise RuntimeFailure(
                f"pod {pod.id} came up with {len(pod.ssh)} nodes ({', '.join(pod.ssh)}); the profile "
                f"wants {nodes}",
                "use a profile whose nodes x nproc_per_node matches the offer (`nsa-launch pods ls "
                "--available`), or rent the cluster yourself and pass each node with --host",
            )
        if pod.ready and len(pod.ssh) < nodes:  # a multi-node pod lists its nodes as they come up
            waiting_for = f"SSH strings for all {nodes} nodes of pod {pod.id} (has {len(pod.ssh)})"
        elif pod.ready:
            hosts = [parse_target(s, ssh_config) for s in pod.ssh]
            pending = [h for h in hosts if not ssh_answers(h.host, h.port or 22)]
            if not pending:
                say(f"pod {pod.id} is ACTIVE and SSH answers ({elapsed:.0f} s)")
                return pod, hosts
            waiting_for = f"SSH on {', '.join(h.label for h in pending)} (pod {pod.id})"
        time.sleep(POLL_S)


def ssh_answers(host: str, port: int, timeout: float = 3.0) -> bool:
    """True when something on host:port sends an SSH banner (a TCP accept alone is not sshd)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


@contextlib.contextmanager
def _deferred_signals() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the few lines between the API returning a pod id and the
    ledger holding it: an interrupt there would lose the only record of a billing pod."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a held signal is delivered here


def previous_choice(run: str | None) -> OfferChoice | None:
    """The options the run's last pod was rented with (a replacement pod is rented alike)."""
    recs = pods_of_run(run) if run else []
    if recs and recs[-1].choice is not None:
        known = set(OfferChoice.__dataclass_fields__)  # a ledger from another version may hold more
        return OfferChoice(**{k: v for k, v in recs[-1].choice.items() if k in known})
    return None


def provision(
    client: PrimeClient,
    profile: Profile,
    gpu_type: str | None,
    name: str,
    run: str | None,
    say: Callable[[str], None],
    timeout: float = READY_TIMEOUT_S,
    ssh_config: str | None = None,
    *,
    choice: OfferChoice | None = None,
) -> tuple[PodRecord, list[HostSpec]]:
    """Rent a pod and wait for it; on any failure (Ctrl-C, SIGTERM, SIGHUP included) terminate it
    before raising. `choice` defaults to the run's previous pod's options, else on-demand secure."""
    choice = choice or previous_choice(run) or OfferChoice()
    if choice.team:
        client.team = choice.team
    if choice.ssh_key_id:
        check_ssh_key(client, choice.ssh_key_id)
    offer = choose_offer(client, profile, gpu_type, choice)
    price = f"${offer.price_hr:.2f}/h" if offer.price_hr is not None else "price unknown"
    nodes = f" as {profile.nodes} nodes" if profile.nodes > 1 else ""
    say(f"renting {offer.gpu_count}x {offer.gpu_type}{nodes} from {describe(offer)}, {price}")
    rec: PodRecord | None = None
    with signals_as_interrupt():
        try:
            with _deferred_signals():  # rent, then record: nothing may come between
                asked = time.time()
                try:
                    pod = client.create_pod(
                        offer, pod_name(name), choice.image, disk=choice.disk, ssh_key_id=choice.ssh_key_id,
                        max_price=choice.max_price,
                    )  # fmt: skip
                except LaunchError as e:
                    if _outcome_known(e):
                        raise
                    # A timeout, a 5xx or an unreadable answer: the API may have made the pod anyway.
                    _end_made_anyway(client, offer, pod_name(name), run, asked, ssh_config, choice, say, e)
                    raise
                rec = PodRecord(
                    id=pod.id,
                    run=run,
                    gpu_type=offer.gpu_type,
                    gpu_count=offer.gpu_count,
                    price_hr=pod.price_hr if pod.price_hr is not None else offer.price_hr,
                    created=time.time(),
                    ssh=[],
                    ssh_config=ssh_config,
                    name=pod.name,
                    choice=asdict(choice),
                    offer=describe(offer),
                )
                save_pod(rec)
            # A signal held while the pod was rented is delivered as the block ends, here, inside the
            # try: the pod it interrupts is then in the ledger and terminated below.
            say(f"created pod {pod.id} ({pod.name})")
            pod, hosts = wait_ready(client, pod, say, timeout, ssh_config, profile.nodes)
            rec.ssh = pod.ssh
            save_pod(rec)
            # inside the try: a Ctrl-C or an unusable known_hosts here left the pod billing, untold
            for h in hosts:
                record_host_key(h, say, lambda: _login_fix(client, choice, ssh_config))
        except BaseException as e:
            if rec is None:  # the API never gave an id: nothing of ours to terminate
                raise
            if isinstance(e, KeyboardInterrupt):
                say(f"{e or 'interrupted'}; terminating pod {rec.id} so nothing is left billing")
            terminate_or_shout(client, rec, say)
            raise
    return rec, hosts


def _login_fix(client: PrimeClient, choice: OfferChoice, ssh_config: str | None) -> str:
    """What helps when no key logs in to a new pod: which of the account's keys the pod was given
    (--ssh-key-id, else the primary) and how to point ssh at its private half."""
    try:
        keys = client.ssh_keys()
    except LaunchError:  # the API cannot be asked now: say what it would have given
        keys = []
    want = choice.ssh_key_id
    key = next((k for k in keys if (k.get("id") == want if want else k.get("isPrimary"))), None)
    if key is None:
        given = f"key {want}" if want else "primary key"
        given = f"the pod was given your Prime account's SSH {given}"
    else:
        which = "--ssh-key-id" if want else "the primary"
        given = f"the pod was given your Prime account's SSH key {key.get('name')} ({key.get('id')}, {which})"
    where = ssh_config or "~/.ssh/config"
    others = [f"{k.get('name')} ({k.get('id')})" for k in keys if k is not key]
    return (
        f"{given}: point ssh at its private key, `IdentityFile ~/.ssh/THAT_KEY` in {where} (a `Host` block "
        "for the pod's address, or `Host *`), or `ssh-add ~/.ssh/THAT_KEY`; then rent again"
        + (f"; or rent with --ssh-key-id naming a key you hold: {', '.join(others)}" if others else "")
    )


def record_host_key(
    spec: HostSpec, say: Callable[[str], None], login_fix: Callable[[], str] | None = None
) -> None:
    """Record a pod's host key in the known_hosts the launcher's SSH reads (trust on first use: a pod
    nsa-launch just rented cannot be known before), so a later `up --host` to it needs no
    --accept-new-host-key. The key is exchanged before login, so it is recorded even when the login
    then fails; that failure is said, not raised (the pod is up; the key may still be on its way),
    except when there is no key to offer at all (NoLogin): that is raised, with `login_fix` (what
    helps: which key the pod was given); the pod is of no use, and "check the host is up" was wrong."""
    from launcher.ssh.transport import NoLogin, SSHTransport, UnusableKnownHosts

    def unusable(e: OSError) -> LaunchError:  # UserKnownHostsFile a directory, or not ours to write
        if not e.filename:  # not a file: the connection itself
            return RuntimeFailure(f"SSH to {spec.target} failed: {e}", "check the pod: `nsa-launch pods ls`")
        return LaunchError(
            f"cannot record the host key of {spec.target}: known_hosts {e.filename or ''} is unusable "
            f"({e.strerror or e})",
            f"make UserKnownHostsFile in {spec.ssh_config or '~/.ssh/config'} name a file you can write "
            "(or drop the line: ~/.ssh/known_hosts), then rent again",
        )

    try:
        t = SSHTransport(spec, accept_new_host_key=True)
    except OSError as e:
        raise unusable(e) from None
    try:
        t.connect()
    except OSError as e:
        raise unusable(e) from None
    except UnusableKnownHosts:  # the new key cannot be saved: the pod is terminated, not kept unchecked
        raise
    except NoLogin as e:  # no key at all: it will not come by waiting
        raise LaunchError(e.message, login_fix() if login_fix else e.fix) from None
    except LaunchError as e:
        if t.recorded_host_key is None:
            say(f"  could not record the host key of {t.label}: {e.message}")
            return
        say(f"  note: {e.message}; fix: {e.fix}")
    finally:
        t.close()
    say(f"  {t.recorded_host_key or f'the host key of {t.label} is already in {t.known_hosts[0]}'}")


def _outcome_known(e: LaunchError) -> bool:
    """Did the API answer a create call with a refusal (a 4xx: no pod was made)? A timeout, a dropped
    connection, a 5xx or an unreadable answer leave it unknown whether the pod exists."""
    if isinstance(e, PrimeAPIError):
        return e.status < 500
    return not isinstance(e, RuntimeFailure)


def _passing(e: BaseException) -> bool:
    """An API error worth retrying: 429, 5xx, no network, an unreadable answer (RuntimeFailure)."""
    if isinstance(e, PrimeAPIError):
        return e.status == 429 or e.status >= 500
    return isinstance(e, RuntimeFailure)


def _end_made_anyway(
    client: PrimeClient,
    offer: Any,
    name: str,
    run: str | None,
    asked: float,
    ssh_config: str | None,
    choice: OfferChoice,
    say: Callable[[str], None],
    why: LaunchError,
) -> None:
    """After a create call whose outcome is unknown, find the pod the API made anyway (the name
    nsa-launch gave it, made since the call, in no ledger), record it and terminate it: its id never
    reached us, so nothing else would ever end its billing. When the API cannot be asked, say so loudly."""
    say(f"creating the pod failed ({why.message}); looking for a pod {name} the API made anyway")
    try:
        found = [p for p in client.list_pods() if p.name == name and load_pod(p.id) is None
                 and _created_since(p.created_at, asked)]  # fmt: skip
    except (LaunchError, KeyboardInterrupt) as e:
        what = e.message if isinstance(e, LaunchError) else "interrupted"
        say(
            f"!!! A POD NAMED {name} MAY BE BILLING: the API could not be asked ({what}). Look: "
            f"`nsa-launch pods ls --all`; terminate it: `nsa-launch pods down POD_ID --force --yes`"
        )
        return
    if not found:
        say(f"the API lists no pod {name}: it made none")
    for p in found:
        rec = PodRecord(
            id=p.id, run=run, gpu_type=offer.gpu_type, gpu_count=offer.gpu_count,
            price_hr=p.price_hr if p.price_hr is not None else offer.price_hr, created=asked, ssh=p.ssh,
            ssh_config=ssh_config, name=p.name, choice=asdict(choice), offer=describe(offer),
        )  # fmt: skip
        save_pod(rec)
        say(f"found pod {p.id} ({p.name}), made though the call failed: terminating it")
        terminate_or_shout(client, rec, say)


def _created_since(created_at: str, asked: float, skew_s: float = 300.0) -> bool:
    """createdAt (ISO 8601) no earlier than the call, give or take clock skew; unreadable: True."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp() >= asked - skew_s
    except (ValueError, AttributeError):
        return True


def terminate_or_shout(client: PrimeClient, rec: PodRecord, say: Callable[[str], None]) -> bool:
    """terminate(), for the paths where the pod must not outlive a failure: when even the retried
    DELETE fails (or a second Ctrl-C cuts it), say loudly that the pod bills on, its id and the exact
    command that ends it; the ledger keeps it live, so `pods ls` and `status` show it. Never raises:
    the caller's own error is the one to report."""
    try:
        terminate(client, rec, say)
        return True
    except (Exception, KeyboardInterrupt) as e:
        if rec.terminated is not None:  # the DELETE went through; what failed came after it
            say(f"terminated pod {rec.id}, but then: {e}")
            return True
        what = e.message if isinstance(e, LaunchError) else (str(e) or type(e).__name__)
        price = f" at ${rec.price_hr:.2f}/h" if rec.price_hr is not None else ""
        say(
            f"!!! POD {rec.id} IS STILL BILLING{price}: terminating it failed ({what}). "
            f"Terminate it: nsa-launch pods down {rec.id} --yes --no-pull"
        )
        return False


def terminate(client: PrimeClient, rec: PodRecord, say: Callable[[str], None]) -> None:
    """Delete the pod (a pod already gone counts as terminated; a 5xx, 429 or lost connection is
    retried for TRANSIENT_S), record the time once, forget its host keys. A record already terminated
    is left as it is: its cost is counted once."""
    if rec.terminated is not None:
        cost = rec.cost()
        say(f"pod {rec.id} was already terminated" + (f" (cost ${cost:.2f})" if cost is not None else ""))
        return
    t0 = time.monotonic()
    while True:
        try:
            client.delete_pod(rec.id)
            break
        except LaunchError as e:
            if isinstance(e, PrimeAPIError) and e.status == 404:
                break
            if not _passing(e) or time.monotonic() - t0 > TRANSIENT_S:
                raise
            say(f"  terminating pod {rec.id}: {e.message}; retrying")
            time.sleep(POLL_S)
    rec.terminated = time.time()
    save_pod(rec)
    for s in rec.ssh:
        forget_host_key(s, rec.ssh_config)
    cost = rec.cost()
    say(f"terminated pod {rec.id}" + (f" (cost ${cost:.2f})" if cost is not None else ""))


def forget_host_key(ssh: str, ssh_config: str | None = None) -> None:
    """Drop the known_hosts line of a terminated pod: its address and port go to the next pod, whose
    new key would otherwise be refused as a MISMATCH."""
    from launcher.ssh.transport import SSHTransport

    try:
        spec = parse_target(ssh, ssh_config)
        files = SSHTransport(spec).known_hosts
    except (LaunchError, OSError):  # OSError: an unusable known_hosts, nothing to forget there
        return
    port = spec.port or 22
    entry = f"[{spec.host}]:{port}" if port != 22 else spec.host
    for f in files:
        p = Path(f)
        if not p.is_file():
            continue
        lines = p.read_text().splitlines(keepends=True)
        kept = [ln for ln in lines if entry not in ln.split(" ", 1)[0].split(",")]
        if len(kept) != len(lines):
            p.write_text("".join(kept))
