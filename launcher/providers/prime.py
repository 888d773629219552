"""The Prime Intellect pods API over plain HTTPS (urllib): availability, create, get, list, delete.

Owns the request and response shapes of the endpoints nsa-launch uses (taken from the `prime`
package's `prime_cli/api/pods.py` and `api/availability.py`, v0.18.0), the API key and base URL
(PRIME_API_KEY, PRIME_API_BASE_URL, as the `prime` CLI reads them) and the translation of HTTP
errors into LaunchError / RuntimeFailure with their fix. It must not open SSH connections, start
runs or import torch; launcher/providers/pods.py does the waiting and the SSH side.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import LaunchError, RuntimeFailure

DEFAULT_BASE_URL = "https://api.primeintellect.ai"
KEYS_URL = "https://app.primeintellect.ai/dashboard/tokens"
BILLING_URL = "https://app.primeintellect.ai/dashboard/billing"
PAGE_SIZE = 100
TIMEOUT_S = 30.0
# Pod `status` values the API reports (prime_cli/utils/display.py and the pods commands).
ACTIVE, PENDING, ERROR, TERMINATED = "ACTIVE", "PENDING", "ERROR", "TERMINATED"
GONE_STATES = (ERROR, TERMINATED)


@dataclass
class Offer:
    """One row of /availability/gpus (GPUAvailability): a GPU type and count someone sells."""

    cloud_id: str
    gpu_type: str
    gpu_count: int
    socket: str | None
    provider: str | None
    data_center: str | None
    stock_status: str
    price_hr: float | None
    images: list[str] = field(default_factory=list)
    disk_default: int | None = None
    vcpu_default: int | None = None
    memory_default: int | None = None

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> Offer:
        prices = d.get("prices") or {}
        # prime_cli's Prices.price: the community price when there is one, else on-demand.
        price = prices.get("communityPrice")
        if price is None:
            price = prices.get("onDemand")
        return cls(
            cloud_id=d["cloudId"],
            gpu_type=d["gpuType"],
            gpu_count=int(d["gpuCount"]),
            socket=d.get("socket"),
            provider=d.get("provider"),
            data_center=d.get("dataCenter"),
            stock_status=d.get("stockStatus") or "",
            price_hr=float(price) if price is not None else None,
            images=list(d.get("images") or []),
            disk_default=(d.get("disk") or {}).get("defaultCount"),
            vcpu_default=(d.get("vcpu") or {}).get("defaultCount"),
            memory_default=(d.get("memory") or {}).get("defaultCount"),
        )


@dataclass
class Pod:
    """The fields of the API's Pod that nsa-launch uses. `ssh` is one `user@ip -p port` per node."""

    id: str
    name: str | None
    gpu_type: str
    gpu_count: int
    status: str
    installation_status: str | None
    price_hr: float | None
    ssh: list[str]
    created_at: str

    @property
    def ready(self) -> bool:
        """ACTIVE with an SSH string; an image still installing (installationStatus) is not ready."""
        installing = self.installation_status not in (None, "FINISHED")
        return self.status == ACTIVE and bool(self.ssh) and not installing

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> Pod:
        conn = d.get("sshConnection")
        if isinstance(conn, str):
            ssh = [conn]
        else:  # a list (multi-node), [None] before it is known (clean_connection_fields)
            ssh = [c for c in conn or [] if c]
        return cls(
            id=d["id"],
            name=d.get("name"),
            gpu_type=d.get("gpuName") or "",
            gpu_count=int(d.get("gpuCount") or 0),
            status=d.get("status") or "",
            installation_status=d.get("installationStatus"),
            price_hr=d.get("priceHr"),
            ssh=ssh,
            created_at=d.get("createdAt") or "",
        )


def api_key(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    key = env.get("PRIME_API_KEY", "").strip()
    if not key:
        raise LaunchError(
            "PRIME_API_KEY is not set: nsa-launch needs a Prime Intellect API key to rent pods",
            f"create a key with the Pods permission at {KEYS_URL}, then export PRIME_API_KEY=...",
        )
    return key


def base_url(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    url = env.get("PRIME_API_BASE_URL") or env.get("PRIME_BASE_URL") or DEFAULT_BASE_URL
    url = url.rstrip("/")
    return url[: -len("/api/v1")] if url.endswith("/api/v1") else url


class PrimeClient:
    """One API key against one base URL. Every method raises LaunchError/RuntimeFailure, never HTTPError."""

    def __init__(self, key: str | None = None, url: str | None = None, timeout: float = TIMEOUT_S):
        self.key = key if key is not None else api_key()
        self.url = url or base_url()
        self.timeout = timeout

    # --- HTTP ---------------------------------------------------------------------------------
    def _request(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None) -> Any:
        query = "?" + urllib.parse.urlencode(params, doseq=True) if params else ""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.url}/api/v1{path}{query}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.key}",
                "Content-Type": "application/json",
                "User-Agent": "nsa-launch",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise self._http_error(method, path, e) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise RuntimeFailure(
                f"cannot reach the Prime Intellect API at {self.url}: {reason}",
                "check the network, or PRIME_API_BASE_URL if you set it",
            ) from None
        return json.loads(raw) if raw else {}

    def _http_error(self, method: str, path: str, e: urllib.error.HTTPError) -> LaunchError:
        text = e.read().decode(errors="replace")
        try:
            detail = json.loads(text).get("detail", text)
        except (ValueError, AttributeError):
            detail = text
        what = f"Prime Intellect API {method} {path}: HTTP {e.code}: {detail}"
        if e.code == 401:
            return LaunchError(
                f"PRIME_API_KEY was rejected ({what})",
                f"check the key, or create a new one with the Pods permission at {KEYS_URL}",
            )
        if e.code == 402 or "quota" in str(detail).lower() or "balance" in str(detail).lower():
            return RuntimeFailure(
                what, f"add funds or raise the quota at {BILLING_URL}, or rent fewer/cheaper GPUs"
            )
        if e.code == 404:
            return LaunchError(what, "`nsa-launch pods ls` lists the pods of this API key")
        if e.code in (400, 409, 422):
            return LaunchError(what, "fix the request named above (GPU type, count, image)")
        return RuntimeFailure(what, "retry later; https://status.primeintellect.ai shows outages")

    # --- endpoints ----------------------------------------------------------------------------
    def gpu_types(self) -> list[str]:
        """GET /availability/gpu-summary: the GPU type names the API knows."""
        return sorted(self._request("GET", "/availability/gpu-summary"))

    def availability(self, gpu_type: str, gpu_count: int, multinode: bool = False) -> list[Offer]:
        """GET /availability/gpus (or /multi-node), every page, as prime_cli's AvailabilityClient."""
        path = "/availability/multi-node" if multinode else "/availability/gpus"
        out: list[Offer] = []
        page = 1
        while True:
            params = {"gpu_type": gpu_type, "gpu_count": str(gpu_count), "page": page, "page_size": PAGE_SIZE}
            resp = self._request("GET", path, params)
            items = resp.get("items", [])
            out.extend(Offer.from_api(i) for i in items)
            if not items or len(out) >= int(resp.get("totalCount", 0)):
                return out
            page += 1

    def create_pod(self, offer: Offer, name: str, image: str | None = None) -> Pod:
        """POST /pods with the body `prime pods create` sends."""
        body = {
            "pod": {
                "name": name,
                "cloudId": offer.cloud_id,
                "gpuType": offer.gpu_type,
                "socket": offer.socket,
                "gpuCount": offer.gpu_count,
                "diskSize": offer.disk_default,
                "vcpus": offer.vcpu_default,
                "memory": offer.memory_default,
                "image": image or (offer.images[0] if offer.images else None),
                "dataCenterId": offer.data_center,
                "maxPrice": None,
                "country": None,
                "security": None,
                "jupyterPassword": None,
                "autoRestart": False,
                "customTemplateId": None,
                "envVars": None,
            },
            "provider": {"type": offer.provider} if offer.provider else {},
            "disks": None,
            "team": {"teamId": os.environ["PRIME_TEAM_ID"]} if os.environ.get("PRIME_TEAM_ID") else None,
        }
        return Pod.from_api(self._request("POST", "/pods", body=body))

    def get_pod(self, pod_id: str) -> Pod:
        return Pod.from_api(self._request("GET", f"/pods/{urllib.parse.quote(pod_id, safe='')}"))

    def list_pods(self) -> list[Pod]:
        out: list[Pod] = []
        while True:
            resp = self._request("GET", "/pods", {"offset": len(out), "limit": PAGE_SIZE})
            data = resp.get("data", [])
            out.extend(Pod.from_api(d) for d in data)
            if not data or len(out) >= int(resp.get("total_count", 0)):
                return out

    def delete_pod(self, pod_id: str) -> None:
        self._request("DELETE", f"/pods/{urllib.parse.quote(pod_id, safe='')}")
