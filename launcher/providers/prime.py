"""The Prime Intellect pods API over plain HTTPS (urllib): availability, SSH keys, create, get, list, delete.

Owns the request and response shapes of the endpoints nsa-launch uses, read from the `prime` package
0.18.0 (`prime_cli/api/pods.py`, `api/availability.py`, `core/client.py`, `core/config.py`,
`commands/pods.py`) and the API's OpenAPI schema (api-evangelist/prime-intellect,
openapi/_original/prime-intellect-compute-api-openapi.yml): the exact paths (collections end in `/`),
following a 307/308 with the same method and body as httpx does for the CLI, a create body the schema
accepts, the key/team/base URL from the environment then `~/.prime/config.json` in the CLI's order, and
the translation of HTTP errors into LaunchError / RuntimeFailure with the fix for each status. It must
not open SSH connections, start runs or import torch; launcher/providers/pods.py chooses offers, waits
and does the SSH side.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.core.errors import LaunchError, RuntimeFailure
from launcher.providers.prime_errors import (  # noqa: F401 (PrimeAPIError, http_error: re-exported)
    DEFAULT_BASE_URL,
    KEYS_URL,
    STATUS_URL,
    PrimeAPIError,
    error_fields,
    http_error,
)

PAGE_SIZE = 100  # the schema's maximum page_size for /availability/gpus; the CLI's limit for /pods/
TIMEOUT_S = 30.0
MAX_REDIRECTS = 5
# PodStatusEnum of the schema. A pod in a STOP state will not become ACTIVE by itself.
PROVISIONING, PENDING, ACTIVE, STOPPED = "PROVISIONING", "PENDING", "ACTIVE", "STOPPED"
ERROR, DELETING, UNKNOWN, TERMINATED = "ERROR", "DELETING", "UNKNOWN", "TERMINATED"
GONE_STATES = (STOPPED, ERROR, DELETING, TERMINATED)
# InstallationStatusEnum: FINISHED is the one that means the image is ready.
INSTALL_FINISHED, INSTALL_ERROR = "FINISHED", "ERROR"
# The pod name rule of `prime pods create` (commands/pods.py): letters, digits and dashes, one letter.
NAME_RE = re.compile(r"^(?=.*[A-Za-z])[A-Za-z0-9-]+$")
POD_NAME_PREFIX = "nsa-"  # every pod nsa-launch creates is named so (plus its ledger entry)
NAME_MAX = 63


def config_file() -> Path:
    """Where the `prime` CLI keeps its settings (core/config.py: Path.home() / ".prime" / "config.json")."""
    return Path.home() / ".prime" / "config.json"


@dataclass
class PrimeConfig:
    """The key, team and base URL, and where each came from (for the error messages)."""

    api_key: str = ""
    key_source: str = ""
    team_id: str | None = None
    team_source: str = ""
    base_url: str = DEFAULT_BASE_URL


def _strip_api_v1(url: str) -> str:
    return url.rstrip("/").removesuffix("/api/v1")  # core/config.py Config._strip_api_v1


def load_config(environ: dict[str, str] | None = None, path: Path | None = None) -> PrimeConfig:
    """core/config.py's precedence: PRIME_API_KEY > file api_key; PRIME_TEAM_ID (not blank) > file
    team_id; PRIME_API_BASE_URL or PRIME_BASE_URL > file base_url > default. The file is only read;
    nsa-launch never writes it (the CLI creates it on first use)."""
    env = os.environ if environ is None else environ
    path = config_file() if path is None else path
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except (ValueError, OSError) as e:
            raise LaunchError(
                f"{path} is not readable JSON ({e})", "fix the file, or run `prime login` to write it again"
            ) from None
        if not isinstance(data, dict):
            raise LaunchError(f"{path} holds {type(data).__name__}, not an object", "run `prime login` again")
    cfg = PrimeConfig()
    if env.get("PRIME_API_KEY"):
        cfg.api_key, cfg.key_source = env["PRIME_API_KEY"].strip(), "PRIME_API_KEY"
    elif str(data.get("api_key") or "").strip():
        cfg.api_key, cfg.key_source = str(data["api_key"]).strip(), f"api_key in {path}"
    if (env.get("PRIME_TEAM_ID") or "").strip():
        cfg.team_id, cfg.team_source = env["PRIME_TEAM_ID"], "PRIME_TEAM_ID"
    elif data.get("team_id"):
        cfg.team_id, cfg.team_source = str(data["team_id"]), f"team_id in {path}"
    url = (
        env.get("PRIME_API_BASE_URL") or env.get("PRIME_BASE_URL") or data.get("base_url") or DEFAULT_BASE_URL
    )
    cfg.base_url = _strip_api_v1(str(url))
    return cfg


def api_key(environ: dict[str, str] | None = None) -> str:
    cfg = load_config(environ)
    if not cfg.api_key:
        raise LaunchError(
            f"PRIME_API_KEY is not set and {config_file()} has no api_key: nsa-launch needs a Prime "
            "Intellect API key to rent pods",
            f"create a key with the Pods permission at {KEYS_URL}, then export PRIME_API_KEY=... "
            "(or run `prime login`)",
        )
    return cfg.api_key


def base_url(environ: dict[str, str] | None = None) -> str:
    return load_config(environ).base_url


def pod_name(label: str) -> str:
    """A name the API takes, tagged as nsa-launch's: the prefix, then the label with every character
    outside letters, digits and dashes (`_` of run ids, `.`) made a dash."""
    body = re.sub(r"-+", "-", re.sub(r"[^A-Za-z0-9-]", "-", label)).strip("-")
    if body.startswith(POD_NAME_PREFIX):
        body = body[len(POD_NAME_PREFIX) :]
    return (POD_NAME_PREFIX + body)[:NAME_MAX].rstrip("-")


@dataclass
class Offer:
    """One GpuAvailability item (/availability/gpus or /multi-node): a GPU type and count someone sells."""

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
    security: str | None = None  # secure_cloud | community_cloud
    is_spot: bool = False
    region: str | None = None
    country: str | None = None
    disk_min: int | None = None
    disk_max: int | None = None

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> Offer:
        return _parsed("an offer", cls._from_api, d)

    @classmethod
    def _from_api(cls, d: dict[str, Any]) -> Offer:
        prices = d.get("prices") or {}
        # api/availability.py Prices.price: the community price when there is one, else on-demand.
        price = prices.get("communityPrice")
        if price is None:
            price = prices.get("onDemand")
        disk = d.get("disk") or {}
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
            disk_default=disk.get("defaultCount"),
            vcpu_default=(d.get("vcpu") or {}).get("defaultCount"),
            memory_default=(d.get("memory") or {}).get("defaultCount"),
            security=d.get("security"),
            is_spot=bool(d.get("isSpot")),
            region=d.get("region"),
            country=d.get("country"),
            disk_min=disk.get("minCount"),
            disk_max=disk.get("maxCount"),
        )

    @property
    def community(self) -> bool:
        return self.security == "community_cloud"

    @property
    def where(self) -> str:
        return "/".join(x for x in (self.region, self.data_center) if x) or "-"


@dataclass
class Pod:
    """The fields of the API's pod (APIPodConfig) nsa-launch uses. `ssh` is one `user@ip -p port` per node."""

    id: str
    name: str | None
    gpu_type: str
    gpu_count: int
    status: str
    installation_status: str | None
    price_hr: float | None
    ssh: list[str]
    created_at: str
    installation_failure: str | None = None
    installation_progress: int | None = None
    provider: str | None = None
    is_spot: bool | None = None
    team_id: str | None = None

    @property
    def ready(self) -> bool:
        """ACTIVE with an SSH string; an image still installing (installationStatus) is not ready."""
        installing = self.installation_status not in (None, INSTALL_FINISHED)
        return self.status == ACTIVE and bool(self.ssh) and not installing

    @property
    def failed(self) -> str | None:
        """Why this pod will never become ready (a STOP state, a failed installation), or None."""
        if self.status in GONE_STATES:
            why = f"is {self.status}"
        elif self.installation_status == INSTALL_ERROR:
            why = "failed to install its image"
        else:
            return None
        return why + (f": {self.installation_failure}" if self.installation_failure else "")

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> Pod:
        return _parsed("a pod", cls._from_api, d)

    @classmethod
    def _from_api(cls, d: dict[str, Any]) -> Pod:
        conn = d.get("sshConnection")
        if isinstance(conn, str):
            ssh = [conn]
        else:  # a list (multi-node), [None] before it is known (api/pods.py clean_connection_fields)
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
            installation_failure=d.get("installationFailure"),
            installation_progress=d.get("installationProgress"),
            provider=d.get("providerType"),
            is_spot=d.get("isSpot"),
            team_id=d.get("teamId"),
        )


class MalformedAnswer(RuntimeFailure):
    """A 2xx whose body is not what the schema says (not JSON, a pod without an id: a proxy's page, an
    API change). Exit 1, and passing while a pod is polled, as a 5xx is: the next answer may be right."""


def _parsed(what: str, make: Callable[[dict[str, Any]], Any], d: Any) -> Any:
    try:
        return make(d)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise MalformedAnswer(
            f"the Prime Intellect API answered with {what} nsa-launch cannot read ({type(e).__name__}: {e}; "
            f"got {str(d)[:200]})",
            f"retry; if it persists, {STATUS_URL} shows outages (or the API changed: report it)",
        ) from None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib refuses to follow a 307 on POST/DELETE (it raises); PrimeClient follows redirects itself."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _origin(url: str) -> tuple[str, str | None, int | None]:
    u = urllib.parse.urlsplit(url)
    return u.scheme, u.hostname, u.port


class PrimeClient:
    """One API key against one base URL. Every method raises LaunchError/RuntimeFailure, never HTTPError."""

    def __init__(
        self,
        key: str | None = None,
        url: str | None = None,
        timeout: float | None = None,
        team: str | None = None,
    ):
        self.config = load_config()
        self.key = key if key is not None else api_key()
        self.url = url or self.config.base_url
        self.timeout = TIMEOUT_S if timeout is None else timeout
        self.team = team or self.config.team_id  # pods/create: `team` from the config when not given

    # --- HTTP ---------------------------------------------------------------------------------
    def _request(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None) -> Any:
        query = "?" + urllib.parse.urlencode(params, doseq=True) if params else ""
        url = f"{self.url}/api/v1{path}{query}"
        data = json.dumps(body).encode() if body is not None else None
        headers = {
            "Authorization": f"Bearer {self.key}",
            "Content-Type": "application/json",
            "User-Agent": "nsa-launch",
        }
        for _hop in range(MAX_REDIRECTS + 1):
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with _OPENER.open(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw) if raw else {}
                except ValueError:
                    raise MalformedAnswer(
                        f"Prime Intellect API {method} {path} answered {resp.status} with a body that is not "
                        f"JSON: {raw[:200]!r}",
                        f"retry; if it persists, {STATUS_URL} shows outages, or PRIME_API_BASE_URL / base_url "
                        "names something that is not the API",
                    ) from None
            except urllib.error.HTTPError as e:
                location = e.headers.get("Location")
                if e.code not in (301, 302, 303, 307, 308) or not location:
                    raise http_error(
                        method, path, e.code, e.read().decode(errors="replace"), self.config
                    ) from None
                # As httpx (follow_redirects=True in core/client.py): 307/308 keep method and body;
                # 303, and 301/302 after a POST, become a GET; Authorization stays only on the same origin.
                new = urllib.parse.urljoin(url, location)
                if e.code == 303 or (e.code in (301, 302) and method == "POST"):
                    method, data = "GET", None
                if _origin(new) != _origin(url):
                    headers = {k: v for k, v in headers.items() if k != "Authorization"}
                url = new
            except (urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                if isinstance(reason, TimeoutError) or isinstance(e, TimeoutError):
                    reason = f"{method} {path} timed out after {self.timeout:g} s"
                raise RuntimeFailure(
                    f"cannot reach the Prime Intellect API at {self.url}: {reason}",
                    "check the network, or PRIME_API_BASE_URL / base_url in ~/.prime/config.json if you set it",
                ) from None
        raise RuntimeFailure(
            f"Prime Intellect API {method} {path}: more than {MAX_REDIRECTS} redirects (last to {url})",
            "check PRIME_API_BASE_URL / base_url: it must be the API root",
        )

    def _paged(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """offset/limit pages (GenericPaginationResponse: data, total_count), as api/pods.py list()."""
        out: list[dict[str, Any]] = []
        while True:
            resp = self._request("GET", path, {**params, "offset": len(out), "limit": PAGE_SIZE})
            data = _parsed(f"a page of {path}", lambda r: list(r["data"] or []), resp)
            out.extend(data)
            if not data or len(out) >= int(resp.get("total_count", 0)):
                return out

    # --- endpoints ----------------------------------------------------------------------------
    def gpu_types(self) -> list[str]:
        """GET /availability/gpu-summary: an object keyed by GPU type (get_available_gpu_types)."""
        return sorted(self._request("GET", "/availability/gpu-summary"))

    def availability(self, gpu_type: str, gpu_count: int, multinode: bool = False) -> list[Offer]:
        """GET /availability/gpus (or /multi-node), every page, as AvailabilityClient._fetch_paginaged."""
        path = "/availability/multi-node" if multinode else "/availability/gpus"
        out: list[Offer] = []
        page = 1
        while True:
            params = {"gpu_type": gpu_type, "gpu_count": str(gpu_count), "page": page, "page_size": PAGE_SIZE}
            resp = self._request("GET", path, params)
            items = _parsed(f"a page of {path}", lambda r: list(r["items"] or []), resp)
            out.extend(Offer.from_api(i) for i in items)
            if not items or len(out) >= int(resp.get("totalCount", 0)):
                return out
            page += 1

    def ssh_keys(self) -> list[dict[str, Any]]:
        """GET /ssh_keys/ (APISSHKeyConfig: id, name, isPrimary): the keys a pod can be given."""
        return self._paged("/ssh_keys/", {})

    def create_pod(
        self,
        offer: Offer,
        name: str,
        image: str | None = None,
        *,
        disk: int | None = None,
        ssh_key_id: str | None = None,
        max_price: float | None = None,
    ) -> Pod:
        """POST /pods/ with a body the schema's Body_create_pod accepts: the fields `prime pods create`
        sends, less the nulls the schema refuses (image, socket, provider), plus the team when one is set."""
        if not NAME_RE.match(name):
            raise LaunchError(
                f"pod name {name!r} has characters the API refuses", "use letters, digits and dashes"
            )
        if not offer.socket or not offer.provider:
            raise LaunchError(
                f"offer {offer.cloud_id} names no {'socket' if not offer.socket else 'provider'}, which "
                "the API needs to create a pod",
                "pick another offer (`nsa-launch pods offers`)",
            )
        pod: dict[str, Any] = {
            "name": name,
            "cloudId": offer.cloud_id,
            "gpuType": offer.gpu_type,
            "socket": offer.socket,
            "gpuCount": offer.gpu_count,
            "diskSize": disk or offer.disk_default,
            "vcpus": offer.vcpu_default,
            "memory": offer.memory_default,
            "dataCenterId": offer.data_center,
            "security": offer.security,
            "autoRestart": False,
        }
        image = image or (offer.images[0] if offer.images else None)
        if image:  # absent: the schema's default (ubuntu_22_cuda_12); null is refused
            pod["image"] = image
        if ssh_key_id:
            pod["sshKeyId"] = ssh_key_id
        if max_price is not None:
            pod["maxPrice"] = max_price
        body: dict[str, Any] = {"pod": pod, "provider": {"type": offer.provider}}
        if self.team:
            body["team"] = {"teamId": self.team}
        return Pod.from_api(self._request("POST", "/pods/", body=body))

    def get_pod(self, pod_id: str) -> Pod:
        return Pod.from_api(self._request("GET", f"/pods/{urllib.parse.quote(pod_id, safe='')}"))

    def list_pods(self) -> list[Pod]:
        return [Pod.from_api(d) for d in self._paged("/pods/", {})]

    def delete_pod(self, pod_id: str) -> None:
        self._request("DELETE", f"/pods/{urllib.parse.quote(pod_id, safe='')}")
