"""Weights & Biases as a second destination of what rank 0 records: config, metrics, events.

Owns reading the W&B environment: WANDB_PROJECT turns it on (nothing else does), WANDB_MODE
(online / offline / disabled), WANDB_ENTITY and WANDB_DIR are W&B's own and passed through. The
run's W&B name and id are the launcher's run id (NSA_RUN_ID; the run dir's name without it), with
resume="allow": a restart of the same run continues the same W&B run. It must never break
training: a W&B failure, at start or after, is printed once and the sink turns itself off. Refused
at validation (nsa.train.cli, exit 2), not silently ignored: WANDB_PROJECT without the `wandb`
package, and WANDB_PROJECT in online mode with no credentials (no WANDB_API_KEY, no netrc entry for
the W&B host), which wandb.init would turn into a crash at step 0.
"""

from __future__ import annotations

import importlib.util
import netrc
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


def problem() -> str | None:
    """Torch-free check for nsa-train's validation: WANDB_PROJECT set but the package missing."""
    if not os.environ.get("WANDB_PROJECT"):
        return None
    if importlib.util.find_spec("wandb") is None:
        return (
            f"WANDB_PROJECT={os.environ['WANDB_PROJECT']!r} is set but the wandb package is not installed, "
            "so nothing would be logged to Weights & Biases. Fix: install the `wandb` extra "
            "(pip install 'nsa-launch[wandb]'), or unset WANDB_PROJECT."
        )
    return _credentials_problem()


def _credentials_problem() -> str | None:
    """Online mode needs a key: from WANDB_API_KEY, or the netrc entry `wandb login` writes."""
    mode = os.environ.get("WANDB_MODE", "online").strip().lower()
    if mode in ("offline", "disabled", "dryrun") or os.environ.get("WANDB_DISABLED", "").lower() == "true":
        return None
    if os.environ.get("WANDB_API_KEY"):
        return None
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        if netrc.netrc(str(path)).authenticators(host):
            return None
    except (OSError, netrc.NetrcParseError):
        pass
    return (
        f"WANDB_PROJECT={os.environ['WANDB_PROJECT']!r} is set, but W&B has no API key here (no WANDB_API_KEY, "
        f"no entry for {host} in {path}), so wandb.init would stop the run at step 0. Fix: pass the key "
        "(nsa-launch up ... --secret WANDB_API_KEY), run `wandb login` on the host, or set WANDB_MODE=offline."
    )


def run_id(run_dir: Path) -> str:
    """The W&B id: the launcher's run id, else the run dir's name (W&B ids allow [A-Za-z0-9_-])."""
    raw = os.environ.get("NSA_RUN_ID") or run_dir.resolve().name
    return re.sub(r"[^A-Za-z0-9_-]", "-", raw)[:64]


class WandbSink:
    def __init__(self, run: Any):
        self.run = run
        self.events: list[list[Any]] = []

    @classmethod
    def start(cls, run_dir: Path, config: dict[str, Any]) -> WandbSink | None:
        """A sink when WANDB_PROJECT is set (rank 0 calls it), else None."""
        project = os.environ.get("WANDB_PROJECT")
        if not project:
            return None
        import wandb

        rid = run_id(run_dir)
        try:
            run = wandb.init(
                project=project,
                name=rid,
                id=rid,
                resume="allow",
                config=config,
                dir=os.environ.get("WANDB_DIR") or str(run_dir),
            )
        except Exception as e:  # e.g. the W&B host unreachable: train without it, and say so once
            print(
                f"[nsa] W&B could not start, training goes on without it: {type(e).__name__}: {e}",
                file=sys.stderr,
            )
            return None
        return cls(run)

    def metrics(self, step: int, values: dict[str, Any]) -> None:
        self._guard(
            lambda: self.run.log({k: v for k, v in values.items() if isinstance(v, (int, float))}, step=step)
        )

    def event(self, kind: str, step: int, detail: dict[str, Any]) -> None:
        # Events are few; they go in a table at the end and, as they happen, in the run's summary.
        self.events.append([step, kind, str(detail)[:500]])
        self._guard(lambda: self.run.summary.update({f"events/{kind}": step}))

    def close(self, exit_code: int = 0) -> None:
        def finish() -> None:
            import wandb

            if self.events:
                self.run.log({"events": wandb.Table(columns=["step", "kind", "detail"], data=self.events)})
            self.run.finish(exit_code=exit_code)

        self._guard(finish)
        self.run = None

    def _guard(self, fn: Any) -> None:
        if self.run is None:
            return
        try:
            fn()
        except Exception as e:  # W&B trouble must not stop training
            print(
                f"[nsa] W&B logging failed and is off for this run: {type(e).__name__}: {e}", file=sys.stderr
            )
            self.run = None
