"""`up`: validate everything locally, then preflight, sync, host env, manifest, start, first heartbeat.

Owns the flow of one run (../shared/DESIGN.md "The flow of one run"). `plan_run` is pure local
validation (profile, config with the profile's world size, env, secrets, host targets, run name)
and raises LaunchError (exit 2) before any host is touched; `execute` does the rest and rolls back
what it started when a later step fails, so nothing is left half-started. It must not parse CLI
arguments (launcher/cli/up.py does) and never imports torch.
"""

from __future__ import annotations

import os
import secrets as pysecrets
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher import __version__, envspec, registry
from launcher.agent import session_name
from launcher.errors import LaunchError, RuntimeFailure
from launcher.hosts import HostSpec, default_target, parse_target
from launcher.profiles import PROJECT_ROOT, Profile, load_profile
from launcher.registry import NodeRecord, RunRecord
from launcher.remote import agent_call, transport_for
from launcher.transport import SSHTransport, Transport

INPUT_CONFIG = "launch_config.yaml"


@dataclass
class UpOptions:
    profile: str | None = None
    hosts: list[str] = field(default_factory=list)
    ssh_config: str | None = None
    config: str | None = None
    sets: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    name: str | None = None
    resume: bool = False
    python: str | None = None
    workdir: str | None = None
    accept_new_host_key: bool = False


@dataclass
class Plan:
    """Everything `execute` needs, all validated."""

    opts: UpOptions
    profile: Profile
    run: str
    hosts: list[HostSpec]
    config_path: Path
    config_text: str
    config_hash: str
    total_steps: int
    stall_seconds: float
    overrides: list[str]
    env: dict[str, str]
    secret_values: dict[str, str]
    workdirs: list[str]
    pythons: list[str | None]
    tmux_socket: str | None


def plan_run(opts: UpOptions, environ: dict[str, str] | None = None) -> Plan:
    """Validate every input locally. Raises LaunchError naming the file/key/value and the fix."""
    environ = dict(os.environ) if environ is None else environ
    profile = load_profile(opts.profile)
    cfg_arg = opts.config or profile.config
    config_path = Path(cfg_arg)
    if not config_path.is_absolute() and not config_path.exists():
        config_path = PROJECT_ROOT / cfg_arg
    overrides = list(profile.overrides) + list(opts.sets)
    try:
        from nsa.train.config import ConfigError, load_config
    except ImportError as e:  # pragma: no cover - the project always ships it
        raise LaunchError(
            f"cannot import the config schema nsa.train.config ({e})", "reinstall the project"
        ) from e
    try:
        cfg = load_config(config_path, overrides=overrides, world_size=profile.world_size)
    except ConfigError as e:
        raise LaunchError(e.summary, e.fix) from None
    env = envspec.validate_env(profile.env, f"profile {profile.source}: env")
    env.update(envspec.parse_assignments(opts.env, "--env"))
    wanted = list(dict.fromkeys(opts.secrets))
    secret_values = envspec.resolve_secrets(wanted, environ)
    for name in profile.secrets:  # the profile's secrets are passed when set locally
        if name not in secret_values and environ.get(name):
            secret_values[name] = environ[name]
    hosts, workdirs, pythons = _bind_hosts(profile, opts)
    if opts.name is not None:
        run = registry.check_run_name(opts.name)
    else:
        stem = (
            "".join(c if c.isalnum() or c in "-_" else "-" for c in config_path.stem)[:24].strip("-_")
            or "run"
        )
        run = f"{stem}-{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}-{pysecrets.token_hex(2)}"
        run = registry.check_run_name(run[:64])
    if registry.exists(run) and not opts.resume:
        raise LaunchError(
            f"a run named {run!r} was already launched from this machine",
            "pick another --name, or `nsa-launch restart --run " + run + "` to continue it",
        )
    return Plan(
        opts=opts,
        profile=profile,
        run=run,
        hosts=hosts,
        config_path=config_path,
        config_text=config_path.read_text(),
        config_hash=cfg.config_hash(),
        total_steps=cfg.train.steps,
        stall_seconds=cfg.telemetry.stall_seconds,
        overrides=overrides,
        env=env,
        secret_values=secret_values,
        workdirs=workdirs,
        pythons=pythons,
        tmux_socket=os.environ.get("NSA_LAUNCH_TMUX_SOCKET") or None,
    )


def _bind_hosts(profile: Profile, opts: UpOptions) -> tuple[list[HostSpec], list[str], list[str | None]]:
    targets = list(opts.hosts) or [h.target for h in profile.hosts]
    if not targets and default_target():
        targets = [default_target()]  # type: ignore[list-item]
    if not targets:
        if profile.nodes > 1:
            raise LaunchError(
                f"profile {profile.name} has {profile.nodes} nodes but no hosts were given",
                f"pass --host once per node ({profile.nodes} times), or list them under hosts:",
            )
        targets = ["local"]
    if len(targets) != profile.nodes:
        raise LaunchError(
            f"profile {profile.name} needs {profile.nodes} host(s), got {len(targets)}: {targets}",
            f"pass --host exactly {profile.nodes} time(s)",
        )
    hosts = [parse_target(t, opts.ssh_config) for t in targets]
    if profile.nodes > 1 and any(h.is_local for h in hosts):
        raise LaunchError("a multi-node run cannot use the local transport", "give every node an SSH host")
    workdirs, pythons = [], []
    for i, h in enumerate(hosts):
        entry = profile.hosts[i] if i < len(profile.hosts) else None
        if h.is_local:
            workdirs.append(str(PROJECT_ROOT))
        else:
            workdirs.append(
                opts.workdir or (entry.workdir if entry and entry.workdir else profile.host.workdir)
            )
        pythons.append(opts.python or (entry.python if entry and entry.python else None))
    for p in pythons:
        if p is not None and not p.startswith("/") and p != "venv":
            raise LaunchError(
                f"--python {p!r} must be an absolute path", "non-interactive SSH has a minimal PATH"
            )
    return hosts, workdirs, pythons


# --- on the hosts ---------------------------------------------------------------------------------
def _preflight_script(
    workdir: str, run: str, python: str | None, base_python: str, tmux_socket: str | None, node: int = 0
) -> str:
    q = shlex.quote
    wd = f'"$HOME"/{q(workdir[2:])}' if workdir.startswith("~/") else q(workdir)
    tmux = "tmux" + (
        f" -S {q(tmux_socket)}"
        if tmux_socket and "/" in tmux_socket
        else f" -L {q(tmux_socket)}"
        if tmux_socket
        else ""
    )
    py = q(python) if python else q(base_python)
    return "\n".join(
        [
            f"wd={wd}",
            'printf "workdir=%s\\n" "$wd"',
            'printf "tmux=%s\\n" "$(command -v tmux)"',
            'printf "rsync=%s\\n" "$(command -v rsync)"',
            f'printf "python=%s\\n" "$({py} -c \'import sys; print("%d.%d" % sys.version_info[:2])\' 2>/dev/null)"',
            'd="$wd"; while [ ! -d "$d" ]; do d=$(dirname -- "$d"); done',
            'printf "free_kb=%s\\n" "$(df -Pk -- "$d" | awk \'NR==2{print $4}\')"',
            "if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null"
            ' | sed "s/^/gpu=/"; fi',
            f'[ -e "$wd"/runs/{q(run)} ] && echo run_dir_exists=1',
            f"{tmux} has-session -t ={q(session_name(run, node))} 2>/dev/null && echo session_exists=1",
            "true",
        ]
    )


def preflight(t: Transport, plan: Plan, i: int) -> dict[str, Any]:
    """Check the host can take the run; returns facts (absolute workdir, has rsync). LaunchError if not."""
    prof = plan.profile
    python = (
        plan.pythons[i]
        if plan.pythons[i] not in (None, "venv")
        else (prof.host.python if prof.host.python != "venv" else None)
    )
    if t.spec.is_local and not plan.pythons[i]:
        import sys

        python = sys.executable
    res = t.run(
        _preflight_script(plan.workdirs[i], plan.run, python, prof.host.base_python, plan.tmux_socket, i),
        timeout=60,
    )
    facts: dict[str, Any] = {"gpus": []}
    for line in res.stdout.splitlines():
        k, _, v = line.partition("=")
        if k == "gpu":
            facts["gpus"].append(v.strip())
        else:
            facts[k] = v.strip()
    where = t.label
    if not facts.get("tmux"):
        raise LaunchError(
            f"{where}: tmux is not installed", "install it on the host: sudo apt-get install -y tmux"
        )
    if not facts.get("python"):
        raise LaunchError(
            f"{where}: python {python or prof.host.base_python} does not run",
            "set --python (or host.python / host.base_python in the profile) to an existing interpreter",
        )
    major, minor = (int(x) for x in facts["python"].split("."))
    if (major, minor) < (3, 10):
        raise LaunchError(
            f"{where}: python is {facts['python']}, need >= 3.10", "point host.base_python at a newer one"
        )
    want = prof.expected_gpus
    got = facts["gpus"]
    if want and len(got) < want:
        raise LaunchError(
            f"{where}: profile {prof.name} expects {want} GPUs, the host shows {len(got)} {got}",
            "pick the profile that matches the host (nsa-launch profiles) or the right host",
        )
    if prof.expect.gpu_name and not all(prof.expect.gpu_name in g for g in got):
        raise LaunchError(
            f"{where}: profile {prof.name} expects {prof.expect.gpu_name} GPUs, the host has {got}",
            "pick the matching profile",
        )
    free_gb = int(facts.get("free_kb") or 0) / 2**20
    if free_gb < prof.expect.min_free_disk_gb:
        raise LaunchError(
            f"{where}: {free_gb:.1f} GB free at {facts.get('workdir')}, profile needs "
            f"{prof.expect.min_free_disk_gb} GB",
            "free disk space or change host.workdir",
        )
    if (facts.get("run_dir_exists") or facts.get("session_exists")) and not plan.opts.resume:
        raise LaunchError(
            f"{where}: a run named {plan.run!r} already exists there (run dir or tmux session)",
            f"pick another --name, or `nsa-launch restart --run {plan.run}`",
        )
    return facts


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
        "env": env_shown,
        "command": argv,
    }


def execute(
    plan: Plan, say: Callable[[str], None] = print, on_sync_progress: Callable[[int], None] | None = None
) -> tuple[RunRecord, float]:
    """Do the run on its host(s). Returns the record and the seconds until torchrun was started."""
    from launcher.hostenv import ensure_python
    from launcher.sync import sync

    t0 = time.monotonic()
    transports = [transport_for(h, accept_new_host_key=plan.opts.accept_new_host_key) for h in plan.hosts]
    facts = []
    for i, t in enumerate(transports):
        facts.append(preflight(t, plan, i))
        say(f"preflight ok on {t.label}: python {facts[i]['python']}, {len(facts[i]['gpus'])} GPU(s)")
    nodes: list[NodeRecord] = []
    for i, t in enumerate(transports):
        workdir = facts[i]["workdir"]
        if isinstance(t, SSHTransport):
            res = sync(
                PROJECT_ROOT,
                t,
                workdir,
                host_has_rsync=bool(facts[i].get("rsync")),
                on_progress=on_sync_progress,
            )
            say(f"synced the project to {t.label}:{workdir} ({res.method}, {res.seconds:.1f} s)")
        python = ensure_python(t, workdir, plan.profile.host, plan.pythons[i], say)
        nodes.append(
            NodeRecord(
                host=plan.hosts[i], workdir=workdir, python=python, run_dir=f"{workdir}/runs/{plan.run}"
            )
        )
    rdzv = None
    if plan.profile.nodes > 1:
        port = plan.profile.torchrun.rdzv_port
        if port == "auto":
            port = agent_call(
                transports[0], nodes[0].workdir, nodes[0].python, "free_port", {"start": 29400}
            )["port"]
        rdzv = f"{plan.profile.torchrun.rdzv_host or transports[0].hostname}:{port}"  # type: ignore[attr-defined]
    rec = RunRecord(
        run=plan.run,
        profile=plan.profile.name,
        created=time.time(),
        nodes=nodes,
        config=str(plan.config_path),
        overrides=plan.overrides,
        env=plan.env,
        secrets=sorted(plan.secret_values),
        tmux_socket=plan.tmux_socket,
        total_steps=plan.total_steps,
        stall_seconds=plan.stall_seconds,
        kill_grace_s=plan.profile.kill_grace_s,
        first_heartbeat_timeout_s=plan.profile.first_heartbeat_timeout_s,
    )
    started: list[int] = []
    try:
        for i, (t, node) in enumerate(zip(transports, nodes)):
            argv = torchrun_argv(plan, node.python, i, node.run_dir, rdzv)
            req = {
                "run": plan.run,
                "node": i,
                "run_dir": node.run_dir,
                "workdir": node.workdir,
                "argv": argv,
                "env": plan.env,
                "secrets": plan.secret_values,
                "tmux_socket": plan.tmux_socket,
                "resume": plan.opts.resume,
                "manifest": manifest(plan, i, t.label, argv),
                "files": {INPUT_CONFIG: plan.config_text},
            }
            reply = agent_call(t, node.workdir, node.python, "start", req, timeout=60)
            if not reply.get("ok"):
                raise LaunchError(f"{t.label}: {reply.get('error')}", reply.get("fix", ""))
            started.append(i)
        registry.save(rec)
    except BaseException:
        from launcher.control import kill_nodes

        kill_nodes(rec, [nodes[i] for i in started])
        raise
    return rec, time.monotonic() - t0


def wait_first_heartbeat(rec: RunRecord, timeout: float | None = None) -> dict[str, Any]:
    """Block until a rank beats (or the run ends, or the timeout); fail fast with the log tail."""
    from launcher.control import kill_run, local_secret_values

    node = rec.nodes[0]
    t = transport_for(node.host)
    timeout = rec.first_heartbeat_timeout_s if timeout is None else timeout
    req = {"run": rec.run, "run_dir": node.run_dir, "tmux_socket": rec.tmux_socket, "timeout_s": timeout}
    reply = agent_call(t, node.workdir, node.python, "wait_started", req, timeout=timeout + 60)
    st = reply["status"]
    secrets = local_secret_values(rec)
    causes = st.get("error_lines") or []
    shown = (["first error lines:", *causes, "log tail:"] if causes else []) + st.get("log_tail", [])
    tail = "\n".join(f"    {ln}" for ln in envspec.scrub("\n".join(shown), secrets).splitlines())
    if reply.get("timed_out"):
        kill_run(rec)
        raise RuntimeFailure(
            f"run {rec.run}: no rank wrote a heartbeat within {timeout:.0f} s; stopped it. Log tail:\n{tail}",
            "read the full log with `nsa-launch logs --run "
            + rec.run
            + "`; raise first_heartbeat_timeout_s if the "
            "host is just slow",
        )
    if st["state"] in ("failed", "killed", "lost"):
        raise RuntimeFailure(
            f"run {rec.run} {st['state']} before its first step "
            f"(exit code {st.get('exit_code')}). Log tail:\n{tail}",
            "fix the error above and start again",
        )
    return st
