"""The Prime Intellect API's error bodies, and the message and fix nsa-launch gives for each HTTP status.

Owns reading the three error shapes the API can answer with (FastAPI's `{"detail": str}` and
`{"detail": [{"loc", "msg"}]}`, which prime_cli/core/client.py parses, and the OpenAPI schema's
ErrorResponse `{"errors": [{"param", "details"}]}`) and the fix per status, naming the option or
setting that feeds a refused field. It must not make requests (launcher/providers/prime.py does).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from launcher.core.errors import EXIT_BAD_INPUT, EXIT_RUNTIME, LaunchError

if TYPE_CHECKING:
    from launcher.providers.prime import PrimeConfig

DEFAULT_BASE_URL = "https://api.primeintellect.ai"
KEYS_URL = "https://app.primeintellect.ai/dashboard/tokens"
BILLING_URL = "https://app.primeintellect.ai/dashboard/billing"
STATUS_URL = "https://status.primeintellect.ai"


class PrimeAPIError(LaunchError):
    """An HTTP error from the API: `status` is the HTTP code, the message quotes the API's detail."""

    def __init__(self, status: int, message: str, fix: str, exit_code: int):
        self.status = status
        super().__init__(message, fix, exit_code=exit_code)


# Which nsa-launch option or setting feeds each request field the API can refuse (for the 422 fix).
FIELD_SOURCE = {
    "pod.name": "--name",
    "pod.image": "--image",
    "pod.diskSize": "--disk",
    "pod.dataCenterId": "--region",
    "pod.maxPrice": "--max-price",
    "pod.sshKeyId": "--ssh-key-id",
    "provider.type": "--provider",
    "team.teamId": "--team (or PRIME_TEAM_ID, or team_id in ~/.prime/config.json)",
    "team": "--team (or PRIME_TEAM_ID, or team_id in ~/.prime/config.json)",
}


def error_fields(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The API's error body as (detail text, [(field, message)]): FastAPI's `{"detail": str}` or
    `{"detail": [{"loc", "msg"}]}` (what core/client.py's ValidationError parses) and the schema's
    ErrorResponse `{"errors": [{"param", "details"}]}`."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500], []
    if not isinstance(body, dict):
        return text.strip()[:500], []
    fields: list[tuple[str, str]] = []
    detail = body.get("detail")
    if isinstance(detail, list):
        for err in detail:
            if isinstance(err, dict):
                loc = ".".join(str(x) for x in err.get("loc", []) if x != "body")  # as ValidationError
                fields.append((loc, str(err.get("msg", "invalid"))))
    for err in body.get("errors") or []:
        if isinstance(err, dict):
            fields.append((str(err.get("param", "")), str(err.get("details", "invalid"))))
    if fields:
        return "; ".join(f"{f or '(body)'}: {m}" for f, m in fields), fields
    return str(detail if detail is not None else text.strip()[:500]), []


def http_error(method: str, path: str, code: int, text: str, cfg: PrimeConfig) -> PrimeAPIError:
    """One message and fix per status; the API's own words are always quoted."""
    detail, fields = error_fields(text)
    what = f"Prime Intellect API {method} {path}: HTTP {code}: {detail}"

    def err(message: str, fix: str, exit_code: int = EXIT_BAD_INPUT) -> PrimeAPIError:
        return PrimeAPIError(code, message, fix, exit_code)

    money = any(w in detail.lower() for w in ("quota", "balance", "insufficient funds"))
    if code == 401:
        return err(
            f"{cfg.key_source or 'PRIME_API_KEY'} was rejected ({what})",
            f"check the key, or create a new one with the Pods permission at {KEYS_URL}",
        )
    if code == 402 or money:
        return err(
            what, f"add funds or raise the quota at {BILLING_URL}, or rent fewer/cheaper GPUs", EXIT_RUNTIME
        )
    if code == 403:
        team = f"; the team is {cfg.team_id} (from {cfg.team_source})" if cfg.team_id else ""
        return err(
            f"the API key may not do this ({what}){team}",
            f"give the key the Pods read+write permission (a new key at {KEYS_URL}), or use a team you "
            "belong to (--team, PRIME_TEAM_ID, team_id in ~/.prime/config.json; `prime teams list`)",
        )
    if code == 404:
        if path.startswith("/pods/") and path.count("/") == 2 and path != "/pods/":
            return err(what, "this account (and team) has no such pod: `nsa-launch pods ls --all` lists them")
        return err(
            what,
            f"{cfg.base_url} has no {path}: check PRIME_API_BASE_URL / base_url (default {DEFAULT_BASE_URL})",
        )
    if code == 405:
        return err(
            what,
            f"{cfg.base_url} does not take {method} {path}: PRIME_API_BASE_URL / base_url must be the API "
            f"root ({DEFAULT_BASE_URL}, no path), not a proxy or the web app",
        )
    if code == 409:
        return err(
            what,
            "the pod is in a state that refuses this now (still provisioning, already deleting): wait a "
            "minute and retry; `nsa-launch pods ls --all` shows its status",
            EXIT_RUNTIME,
        )
    if code == 422:
        named = [f for f, _ in fields]
        opts = sorted({FIELD_SOURCE[f] for f in named if f in FIELD_SOURCE})
        fields_txt = ", ".join(named) if named else "the request"
        fix = (
            f"the API refused {fields_txt}: change {' / '.join(opts)} (`nsa-launch pods offers` lists what the offers take)"
            if opts
            else f"the API refused {fields_txt}, which nsa-launch built: report it with the detail above"
        )
        return err(f"the API refused the request's {fields_txt} ({what})", fix)
    if code == 429:
        return err(
            what,
            "too many requests: wait a minute, then retry (one nsa-launch at a time per key)",
            EXIT_RUNTIME,
        )
    if code == 400:
        return err(what, "fix the value the API names above (GPU type, count, image, disk, region)")
    return err(what, f"retry later; {STATUS_URL} shows outages", EXIT_RUNTIME)
