"""`up`, what a run records: the torchrun command line, the git state and manifest.json (secrets masked).

Pure functions of a Plan (plus `git` on this machine); they must not touch a host.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from launcher import __version__
from launcher.config import envspec
from launcher.config.profiles import PROJECT_ROOT
from launcher.launch.plan import INPUT_CONFIG, Plan

TORCHRUN_LOGS = "torchrun"  # in the run dir: torchrun's per-rank stdout/stderr and error.json files


def torchrun_argv(plan: Plan, python: str, node_rank: int, run_dir: str, rdzv: str | None) -> list[str]:
    prof = plan.profile
    argv = [
        python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(prof.nodes),
        "--nproc-per-node",
        str(prof.nproc_per_node),
        "--max-restarts",
        str(prof.torchrun.max_restarts),
    ]
    if prof.nodes == 1:
        argv += ["--standalone"]
    else:
        argv += [
            "--node-rank",
            str(node_rank),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            str(rdzv),
            "--rdzv-id",
            plan.run,
        ]
    # Every worker line reaches train.log as "[rankN]:<line>" (global rank: the wrapper sets
    # TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE), so `logs` readers and the dashboard's rank filter can
    # tell ranks apart; --tee needs a log dir, where torchrun also keeps each rank's own copy.
    argv += ["--tee", "3", "--log-dir", f"{run_dir}/{TORCHRUN_LOGS}"]
    argv += list(prof.torchrun.extra_args)
    argv += ["-m", "nsa.train", "--config", f"{run_dir}/{INPUT_CONFIG}", "--run-dir", run_dir]
    for s in plan.overrides:
        argv += ["--set", s]
    return argv


def git_state() -> dict[str, Any]:
    try:
        sha = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "-uno"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        )
    except (OSError, subprocess.TimeoutExpired):
        return {"sha": None, "dirty": None}
    return {"sha": sha or None, "dirty": dirty}


def manifest(plan: Plan, node_rank: int, host: str, argv: list[str]) -> dict[str, Any]:
    env_shown = envspec.mask({**plan.env, **plan.secret_values})
    return {
        "run": plan.run,
        "created": time.time(),
        "launcher_version": __version__,
        "git": git_state(),
        "profile": plan.profile.name,
        "profile_source": plan.profile.source,
        "profile_data": plan.profile.model_dump(mode="json"),
        "host": host,
        "node_rank": node_rank,
        "nodes": plan.profile.nodes,
        "world_size": plan.profile.world_size,
        "config": str(plan.config_path),
        "config_hash": plan.config_hash,
        "overrides": plan.overrides,
        "total_steps": plan.total_steps,
        "stall_seconds": plan.stall_seconds,
        "max_restarts": plan.profile.max_restarts
        if plan.opts.max_restarts is None
        else plan.opts.max_restarts,
        "env": env_shown,
        "command": argv,
    }
