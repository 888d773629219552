"""Renting a pod for a run: pick an offer, create, wait until SSH answers, terminate; the local pod ledger.

Owns the choice of offer (the profile's GPU type and count, cheapest in stock), the wait for a
created pod (ACTIVE with an SSH string, then an SSH banner on that port; progress with elapsed time,
a timeout naming what it waited for), terminating a pod it created when a later step fails (nothing
left billing), recording a new pod's host key and forgetting a terminated pod's, and the ledger of pods nsa-launch created
($NSA_LAUNCH_HOME/pods/<id>.json: run, price, times) from which status shows the cost so far. It must
not start runs (launcher/launch does) or import torch.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher import registry
from launcher.errors import LaunchError, RuntimeFailure
from launcher.profiles import Profile
from launcher.providers.prime import GONE_STATES, Offer, Pod, PrimeClient
from launcher.ssh.hosts import HostSpec, parse_target

READY_TIMEOUT_S = 900.0
POLL_S = 2.0


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


def run_cost(run: str) -> dict[str, Any] | None:
    """Pod id, $/hour and dollars so far of a provisioned run (every pod it used), or None."""
    recs = pods_of_run(run)
    if not recs:
        return None
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
    }


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


def choose_offer(client: PrimeClient, profile: Profile, gpu_type: str | None) -> Offer:
    """The cheapest offer in stock of the profile's GPUs: per node for one node; for N nodes a
    multi-node offer (/availability/multi-node, whose gpuCount is the total, as `prime` lists them).
    No stock: RuntimeFailure (exit 1)."""
    types = gpu_type_for(client, profile, gpu_type)
    multinode = profile.nodes > 1
    count = profile.nproc_per_node * profile.nodes
    offers = [o for t in types for o in client.availability(t, count, multinode) if o.gpu_count == count]
    offers = [o for o in offers if o.stock_status.lower() not in ("", "unavailable", "out of stock")]
    if not offers:
        what = f"{count}x {' or '.join(types)}"
        if multinode:
            what = f"a multi-node cluster of {what} ({profile.nodes} nodes x {profile.nproc_per_node})"
        raise RuntimeFailure(
            f"no Prime Intellect offer has {what} in stock now",
            "try another --gpu-type (`nsa-launch pods ls --available --gpu-type T"
            + (f" --count {count} --multi-node" if multinode else "")
            + "`), or later",
        )
    return min(offers, key=lambda o: o.price_hr if o.price_hr is not None else float("inf"))


def wait_ready(
    client: PrimeClient,
    pod: Pod,
    say: Callable[[str], None],
    timeout: float = READY_TIMEOUT_S,
    ssh_config: str | None = None,
    nodes: int = 1,
) -> tuple[Pod, list[HostSpec]]:
    """Poll until the pod is ACTIVE with an SSH string per node and sshd answers on every one.
    A pod that comes up with another number of nodes than the profile's is an error (exit 1)."""
    t0 = time.monotonic()
    last_say = 0.0
    waiting_for = f"pod {pod.id} to become ACTIVE"
    while True:
        elapsed = time.monotonic() - t0
        if elapsed > timeout:
            raise RuntimeFailure(
                f"gave up after {timeout:.0f} s waiting for {waiting_for} (last status {pod.status})",
                "the pod was terminated; try again, another --gpu-type, or a longer --ready-timeout",
            )
        if elapsed - last_say >= 5.0:
            say(f"  waiting for {waiting_for} ({elapsed:.0f} s, status {pod.status})")
            last_say = elapsed
        pod = client.get_pod(pod.id)
        if pod.status in GONE_STATES:
            raise RuntimeFailure(
                f"pod {pod.id} went {pod.status} while starting", "try again, or another --gpu-type"
            )
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


def provision(
    client: PrimeClient,
    profile: Profile,
    gpu_type: str | None,
    name: str,
    run: str | None,
    say: Callable[[str], None],
    timeout: float = READY_TIMEOUT_S,
    ssh_config: str | None = None,
) -> tuple[PodRecord, list[HostSpec]]:
    """Rent a pod and wait for it; on any failure (Ctrl-C included) terminate it before raising."""
    offer = choose_offer(client, profile, gpu_type)
    price = f"${offer.price_hr:.2f}/h" if offer.price_hr is not None else "price unknown"
    nodes = f" as {profile.nodes} nodes" if profile.nodes > 1 else ""
    say(
        f"renting {offer.gpu_count}x {offer.gpu_type}{nodes} from {offer.provider} ({offer.data_center}), {price}"
    )
    pod = client.create_pod(offer, name)
    rec = PodRecord(
        id=pod.id,
        run=run,
        gpu_type=offer.gpu_type,
        gpu_count=offer.gpu_count,
        price_hr=pod.price_hr if pod.price_hr is not None else offer.price_hr,
        created=time.time(),
        ssh=[],
        ssh_config=ssh_config,
    )
    save_pod(rec)
    say(f"created pod {pod.id}")
    try:
        pod, hosts = wait_ready(client, pod, say, timeout, ssh_config, profile.nodes)
    except BaseException:
        terminate(client, rec, say)
        raise
    rec.ssh = pod.ssh
    save_pod(rec)
    for h in hosts:
        record_host_key(h, say)
    return rec, hosts


def record_host_key(spec: HostSpec, say: Callable[[str], None]) -> None:
    """Record a pod's host key in the known_hosts the launcher's SSH reads (trust on first use: a pod
    nsa-launch just rented cannot be known before), so a later `up --host` to it needs no
    --accept-new-host-key. The key is exchanged before login, so it is recorded even when the login
    then fails; that failure is said, not raised (the pod is up; the key may still be on its way)."""
    from launcher.ssh.transport import SSHTransport

    t = SSHTransport(spec, accept_new_host_key=True)
    try:
        t.connect()
    except LaunchError as e:
        if t.recorded_host_key is None:
            say(f"  could not record the host key of {t.label}: {e.message}")
            return
        say(f"  note: {e.message}; fix: {e.fix}")
    finally:
        t.close()
    say(f"  {t.recorded_host_key or f'the host key of {t.label} is already in {t.known_hosts[0]}'}")


def terminate(client: PrimeClient, rec: PodRecord, say: Callable[[str], None]) -> None:
    """Delete the pod (a pod already gone counts as terminated), record the time, forget its host keys."""
    try:
        client.delete_pod(rec.id)
    except LaunchError as e:
        if "HTTP 404" not in e.message:
            raise
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
    except LaunchError:
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
