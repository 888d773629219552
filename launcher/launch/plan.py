"""`up`, step 1: validate every input locally into a Plan, before any host is touched.

Owns `plan_run`: profile, config with the profile's world size and --set overrides, env, secrets,
host targets (bound to workdirs and pythons) and the run name. Raises LaunchError (exit 2) naming the
file/key/value and the fix. It must not open a connection, parse CLI arguments (launcher/cli/up.py
does) or import torch.
"""

from __future__ import annotations

import os
import secrets as pysecrets
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher.config import envspec
from launcher.config.profiles import PROJECT_ROOT, Profile, load_profile
from launcher.core.errors import LaunchError
from launcher.run import registry
from launcher.ssh.hosts import HostSpec, check_known_name, default_target, parse_target

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
    from_scratch: bool = False  # with resume: same run dir, no --resume (damaged checkpoints moved aside)
    python: str | None = None
    workdir: str | None = None
    accept_new_host_key: bool = False
    max_restarts: int | None = None  # None: the profile's max_restarts
    allreduce_check: bool | None = None  # None: when the profile has > 1 GPU or > 1 node


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


def _check_backend(cfg: Any, profile: Any, env: dict[str, str]) -> None:
    """model.nsa.backend=triton on a CPU profile: nsa-train would refuse it at boot (exit 2 on the
    host, after the run was created); say so here, before the host is touched."""
    nsa_triton = cfg.model.attention == "nsa" and cfg.model.nsa.backend == "triton"
    interpreting = env.get("TRITON_INTERPRET", "0") not in ("", "0")
    if nsa_triton and profile.device == "cpu" and not interpreting:
        raise LaunchError(
            f"config model.nsa.backend = 'triton' on the CPU profile {profile.name!r}: the triton kernels "
            "run on CPU only in triton's slow interpreter",
            "set model.nsa.backend=auto (eager on CPU, triton on CUDA), or use a GPU profile",
        )


RUN_ID_MAX = 24  # a table at 80 columns shows it whole beside state, step and loss


def default_run_id(config_stem: str, now: float | None = None, suffix: str | None = None) -> str:
    """`<config>-<MMDD>-<4 hex>`, at most RUN_ID_MAX characters: tiny-1125-a3f2. The config name is
    cut to fit; the profile, host and exact time are in the run's record and manifest."""
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in config_stem)
    stem = stem[: RUN_ID_MAX - len("-MMDD-xxxx")].strip("-_") or "run"
    day = time.strftime("%m%d", time.localtime(now))
    return f"{stem}-{day}-{suffix or pysecrets.token_hex(2)}"


def _overrides_label(profile: Profile, opts: UpOptions) -> str:
    """Where a config error's overrides came from: the profile's own (its `overrides:`) apart from --set."""
    parts = [f"profile {profile.name}'s overrides {' '.join(profile.overrides)}"] if profile.overrides else []
    if opts.sets:
        parts.append(f"--set {' '.join(opts.sets)}")
    return "; ".join(parts)


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
        cfg = load_config(
            config_path,
            overrides=overrides,
            world_size=profile.world_size,
            overrides_label=_overrides_label(profile, opts),
        )
    except ConfigError as e:
        raise LaunchError(e.summary, e.fix) from None
    env = envspec.validate_env(profile.env, f"profile {profile.source}: env")
    env.update(envspec.parse_assignments(opts.env, "--env"))
    _check_backend(cfg, profile, env)
    wanted = list(dict.fromkeys(opts.secrets))
    secret_values = envspec.resolve_secrets(wanted, environ)
    for name in profile.secrets:  # the profile's secrets are passed when set locally
        if name not in secret_values and environ.get(name):
            secret_values[name] = environ[name]
    hosts, workdirs, pythons = _bind_hosts(profile, opts)
    if opts.name is not None:
        run = registry.check_run_name(opts.name)
    else:
        run = default_run_id(config_path.stem)
        for _ in range(8):  # 65536 suffixes a day per config: a clash is rare, and drawn again
            if not registry.exists(run):
                break
            run = default_run_id(config_path.stem)
        run = registry.check_run_name(run[:64])
    if opts.from_scratch and not opts.resume:
        raise LaunchError("--from-scratch restarts an existing run", "add --resume (and --name RUN)")
    if registry.exists(run) and not opts.resume:
        raise LaunchError(
            f"a run named {run!r} was already launched from this machine",
            "pick another --name; a run of that name that stopped before its last step continues with "
            f"`nsa-launch restart --run {run}` (a finished one has nothing to continue)",
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


def with_recorded_inputs(
    opts: UpOptions, rec: registry.RunRecord | None = None
) -> tuple[UpOptions, list[str]]:
    """`up --resume --name R` of a run launched from this machine: the config, `--set`s, `--env`s and
    `--secret`s it was launched with, for each of the four this `up` does not give (a given one
    replaces the recorded one, on purpose). Without this a resume took the profile's default config
    and no `--set`/`--env`: the run dir's config was overwritten with another (a different model, or
    a crash at the checkpoint load) while its wrapper kept the old overrides, and an `--env` was lost
    (the qa walk of 2026-11-27). `rec`: R's record, else read from the registry (a pod replacement,
    launcher/recover/replace.py, passes the one it holds). Returns the options and, to say, what was
    taken from the record."""
    if rec is None and opts.resume and opts.name and registry.exists(opts.name):
        rec = registry.load(opts.name)
    if rec is None:
        return opts, []
    taken = []
    new = replace(opts)
    if opts.config is None and rec.config:
        new.config, taken = rec.config, [f"config {rec.config}"]
    if not opts.sets:
        profile = load_profile(opts.profile)
        new.sets = [o for o in rec.overrides if o not in profile.overrides]
        taken += [f"--set {o}" for o in new.sets]
    if not opts.env and rec.env:
        new.env = [f"{k}={v}" for k, v in rec.env.items()]
        taken += [f"--env {k}" for k in rec.env]
    if not opts.secrets and rec.secrets:
        new.secrets = list(rec.secrets)
        taken += [f"--secret {k}" for k in rec.secrets]
    return new, taken


def check_resume_target(plan: Plan) -> None:
    """`nsa-launch up --resume`: the run's record names the profile and hosts it ran with.

    `up --resume` takes its profile and hosts from its options, as every `up` does; without them, the
    documented `up --resume --name R` looked for a remote run on this machine (`run dir .../runs/R has
    no manifest.json`). Say where R ran and how to continue it. Only the CLI asks: a pod replacement
    (launcher/recover/replace.py) resumes a run on new hosts on purpose."""
    rec = registry.load(plan.run) if plan.opts.resume else None
    if rec is None:
        return
    profile, hosts, opts = plan.profile, plan.hosts, plan.opts
    was = [n.host.label for n in rec.nodes]
    if [h.label for h in hosts] == was and profile.name == rec.profile:
        return
    args = f"--profile {rec.profile}" + "".join(f" --host {n.host.target}" for n in rec.nodes)
    cfg = rec.nodes[0].host.ssh_config
    args += f" --ssh-config {cfg}" if cfg else ""
    scratch = " --from-scratch" if opts.from_scratch else ""
    raise LaunchError(
        f"run {rec.run} ran on {', '.join(was)} (profile {rec.profile}); this `up --resume` names "
        f"{', '.join(h.label for h in hosts)} (profile {profile.name})",
        f"name them as it was launched: nsa-launch up --resume{scratch} --name {rec.run} {args} (with its "
        f"--workdir, --python and --set too); or `nsa-launch restart --run {rec.run}`, which continues it where it is",
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
    if opts.workdir and all(h.is_local for h in hosts):
        raise LaunchError(
            f"--workdir {opts.workdir} is for SSH hosts: a run on this machine runs in this checkout, "
            f"{PROJECT_ROOT}",
            "drop --workdir, or pass --host user@host to run in a directory of another machine",
        )
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
    for h in hosts:  # last: the checks above need no name lookup
        check_known_name(h)
    return hosts, workdirs, pythons
