"""Hardware profiles: load and validate profiles/*.yaml (and the embedded `cpu` default).

Owns the profile schema (pydantic, extra="forbid"), where profiles are found (the project's
profiles/ dir, or a path given to --profile) and the errors for bad ones: file, key, value and fix,
with a did-you-mean for unknown keys and names. A profile describes the hardware shape and the
runtime (nodes, workers per node, device, torchrun arguments, default config, env, host python and
workdir, preflight expectations); training knobs stay in the config. It must not touch a host, and
never imports torch. Documented for humans in docs/profiles.md.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from launcher.config.envspec import SECRET_NAMES, check_name, clip, validate_env
from launcher.core.errors import LaunchError
from nsa import yamlsafe

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # launcher/config/profiles.py -> the checkout
PROFILES_DIR = PROJECT_ROOT / "profiles"
DEFAULT_PROFILE = "cpu"

# The default profile, embedded so `nsa-launch up` works even where profiles/ is not on disk
# (a wheel install). profiles/cpu.yaml is the same data; a unit test keeps the two equal.
EMBEDDED_CPU: dict[str, Any] = {
    "name": "cpu",
    "description": "2 CPU workers with gloo on this machine: the embedded default, needs nothing set up.",
    "device": "cpu",
    "nodes": 1,
    "nproc_per_node": 2,
    "config": "configs/tiny.yaml",
    "overrides": ["train.device=cpu"],
    "env": {"OMP_NUM_THREADS": "1"},
    "host": {"python": "venv", "workdir": "~/nsa-launch"},
    "expect": {"gpus": 0, "min_free_disk_gb": 1},
    "first_heartbeat_timeout_s": 300,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TorchrunSpec(_Strict):
    """How torchrun is started on every node."""

    rdzv_port: int | Literal["auto"] = Field(
        "auto", description="c10d rendezvous port on node 0; auto = a free port the agent picks there."
    )
    rdzv_host: str | None = Field(
        None, description="Address the other nodes reach node 0 at; default: node 0's SSH host name."
    )
    max_restarts: int = Field(
        0,
        ge=0,
        le=100,
        description="torchrun's own --max-restarts (elastic, same argv, no resume); keep 0 and use the "
        "profile's max_restarts (the wrapper's loop, resumes from the newest intact checkpoint).",
    )
    extra_args: list[str] = Field(
        default_factory=list, description="More torchrun arguments, passed verbatim."
    )

    @field_validator("rdzv_port")
    @classmethod
    def _port(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1024 <= v <= 65535:
            raise ValueError("must be 1024..65535 or 'auto'")
        return v


class HostEnv(_Strict):
    """The Python environment and directory a host runs in."""

    python: str = Field(
        "venv",
        description="venv = a venv in <workdir>/.venv built once per dependency-spec hash; "
        "or an absolute path to an interpreter that already has the project's dependencies.",
    )
    base_python: str = Field("python3", description="Interpreter that creates the venv.")
    extras: list[str] = Field(
        default_factory=lambda: ["train"], description="Project extras whose dependencies the venv gets."
    )
    pip_args: list[str] = Field(default_factory=list, description="Extra pip arguments (e.g. an index URL).")
    workdir: str = Field(
        "~/nsa-launch", description="Where the project is synced on the host (~ = remote home)."
    )

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        if v != "venv" and not v.startswith("/"):
            raise ValueError("must be 'venv' or an absolute path (non-interactive SSH has a minimal PATH)")
        return v


class HostEntry(_Strict):
    """A host the profile names itself (one per node); --host overrides the target."""

    target: str = Field(..., description="OpenSSH alias, user@host[:port], or 'user@host -p PORT'.")
    workdir: str | None = Field(None, description="Overrides host.workdir for this host.")
    python: str | None = Field(None, description="Overrides host.python for this host.")


class Expect(_Strict):
    """Checked at preflight, before any sync or start."""

    gpus: int | None = Field(
        None, ge=0, le=64, description="GPUs the host must show; default nproc_per_node on cuda."
    )
    gpu_name: str | None = Field(None, description="Substring every GPU name must contain (e.g. A100).")
    min_free_disk_gb: float = Field(
        5.0, ge=0, le=1e6, description="Free disk needed in the workdir's filesystem."
    )


KILL_GRACE_DEFAULT_S = 120.0


def kill_env(grace_s: float) -> dict[str, str]:
    """What a run's workers and torchrun are told of the kill grace: the trainer's save budget ends
    before the SIGKILL (a quarter of the grace, at most 15 s, is left for exiting), and torchrun
    waits as long as the launcher before it SIGKILLs its workers itself."""
    save = grace_s - min(15.0, grace_s / 4)
    return {"NSA_TERM_SAVE_S": f"{save:g}", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(max(1, round(grace_s)))}


class Profile(_Strict):
    """One hardware profile."""

    name: str
    description: str = ""
    device: Literal["cpu", "cuda"]
    nodes: int = Field(1, ge=1, le=64)
    nproc_per_node: int = Field(..., ge=1, le=64)
    config: str = Field("configs/tiny.yaml", description="Default training config, relative to the project.")
    overrides: list[str] = Field(
        default_factory=list, description="--set overrides the profile always applies."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Runtime env vars (validated, docs/env.md)."
    )
    secrets: list[str] = Field(
        default_factory=list, description="Secret names passed from the local env if set."
    )
    torchrun: TorchrunSpec = Field(default_factory=TorchrunSpec)
    host: HostEnv = Field(default_factory=HostEnv)
    hosts: list[HostEntry] = Field(
        default_factory=list, description="Hosts by node; empty = --host or local."
    )
    expect: Expect = Field(default_factory=Expect)
    first_heartbeat_timeout_s: float = Field(
        900.0, gt=0, le=86400, description="`up` fails if no rank beats by then."
    )
    max_restarts: int = Field(
        3,
        ge=0,
        le=100,
        description="Restarts of a failed run on its host from the newest intact checkpoint (wrapper loop); "
        "0: a failure ends the run. `up --max-restarts` overrides.",
    )
    kill_grace_s: float = Field(
        KILL_GRACE_DEFAULT_S,
        gt=0,
        le=3600,
        description=(
            "Seconds between SIGTERM and SIGKILL on kill/restart. On SIGTERM the trainer checkpoints at the "
            "next step boundary, then exits; the grace must cover one step plus a save (120 s: the M7C save, "
            "docs/launcher.md). The run gets NSA_TERM_SAVE_S and TORCH_ELASTIC_SHUTDOWN_TIMEOUT from it."
        ),
    )

    _source: str = ""

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, v: Any) -> Any:
        # YAML reads `1` as an int; env values are strings on the host anyway.
        if isinstance(v, dict):
            return {k: (str(x).lower() if isinstance(x, bool) else str(x)) for k, x in v.items()}
        return v

    @model_validator(mode="after")
    def _hosts(self) -> Profile:
        if self.hosts and len(self.hosts) != self.nodes:
            raise ValueError(f"names {len(self.hosts)} hosts but nodes={self.nodes}; list one host per node")
        return self

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def expected_gpus(self) -> int:
        if self.expect.gpus is not None:
            return self.expect.gpus
        return self.nproc_per_node if self.device == "cuda" else 0

    @property
    def source(self) -> str:
        return self._source


def available() -> dict[str, Path | None]:
    """Profile name -> file (None for the embedded default when no file is on disk)."""
    found: dict[str, Path | None] = {DEFAULT_PROFILE: None}
    if PROFILES_DIR.is_dir():
        for p in sorted(PROFILES_DIR.glob("*.yaml")):
            found[p.stem] = p
    return found


def _is_file_arg(name: str) -> bool:
    """A --profile value naming a YAML file rather than a profile."""
    return name.endswith((".yaml", ".yml")) or "/" in name


def profile_file(name_or_path: str | None) -> str | None:
    """The absolute path of a profile given as a file (what load_profile reads), None for a name."""
    return str(Path(name_or_path).resolve()) if name_or_path and _is_file_arg(name_or_path) else None


def load_profile(name_or_path: str | None) -> Profile:
    """A validated profile by name (profiles/<name>.yaml) or by path to a YAML file."""
    name = name_or_path or DEFAULT_PROFILE
    if _is_file_arg(name):
        path = Path(name)
        if not path.is_file():
            raise LaunchError(
                f"profile file {name} does not exist",
                "pass a profile name (nsa-launch profiles) or an existing .yaml file",
            )
        return _load_file(path)
    known = available()
    if name not in known:
        near = difflib.get_close_matches(name, list(known), n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise LaunchError(
            f"unknown profile {name!r}",
            f"{hint}known profiles: {', '.join(known)} (or pass a path to a profile .yaml)",
        )
    path = known[name]
    if path is None:
        return _validate(dict(EMBEDDED_CPU), "<embedded cpu profile>")
    return _load_file(path)


def _load_file(path: Path) -> Profile:
    try:
        raw = yamlsafe.load(yamlsafe.read_text(path))  # text only, alias budget (nsa/yamlsafe.py)
    except yamlsafe.BadYaml as e:
        raise LaunchError(f"profile {path}: {e.problem}", e.fix) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise LaunchError(f"profile {path}: not valid YAML{where}", "fix the YAML syntax there") from None
    except OSError as e:
        raise LaunchError(
            f"profile {path}: cannot read ({e.strerror})", "check the path and permissions"
        ) from None
    if not isinstance(raw, dict):
        raise LaunchError(
            f"profile {path}: the top level must be a mapping", "see docs/profiles.md for the keys"
        )
    raw.setdefault("name", path.stem)
    return _validate(raw, str(path))


def _validate(raw: dict[str, Any], source: str) -> Profile:
    try:
        prof = Profile.model_validate(raw)
    except ValidationError as err:
        raise _explain(err, source) from None
    prof._source = source
    validate_env(prof.env, f"profile {source}: env")
    for s in prof.secrets:
        check_name(s, f"profile {source}: secrets")
        if s not in SECRET_NAMES:
            raise LaunchError(
                f"profile {source}: secrets lists {s}, which is not a secret",
                f"move it to env: (secrets are {', '.join(sorted(SECRET_NAMES))})",
            )
    return prof


def _explain(err: ValidationError, source: str) -> LaunchError:
    e = err.errors(include_url=False)[0]
    loc = [p for p in e["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal[")))]
    key = ".".join(str(p) for p in loc) or "(top level)"
    value = e.get("input")
    if e["type"] == "extra_forbidden":
        model: type[BaseModel] = Profile
        for part in loc[:-1]:
            field = model.model_fields.get(str(part))
            ann = field.annotation if field else None
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                model = ann
        known = sorted(model.model_fields)
        near = difflib.get_close_matches(str(loc[-1])[:200], known, n=1)
        hint = f"did you mean {near[0]!r}? " if near else "remove it. "
        return LaunchError(
            f"profile {source}: unknown key {clip(key)}", f"{hint}Known keys there: {', '.join(known)}"
        )
    if e["type"] == "missing":
        return LaunchError(
            f"profile {source}: required key {key} is missing", f"add `{key}: ...` (docs/profiles.md)"
        )
    msg = e["msg"].removeprefix("Value error, ")
    return LaunchError(
        f"profile {source}: {clip(key)} = {clip(repr(value))}: {clip(msg, 400)}",
        f"set {clip(key)} to a valid value (docs/profiles.md)",
    )
