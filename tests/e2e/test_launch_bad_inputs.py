"""A corpus of bad inputs to `nsa-launch up`: each exits 2 (1 for an unreachable host) with a message
that names the fix, and nothing is created: no run dir, no registry record, no tmux session.

Most cases never reach a host (validation is local); the host cases run against the real loopback
sshd. The injection cases check that names carrying shell syntax are refused at the edge.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from tests.e2e.launch_support import PYTHON, invoke, isolate

pytestmark = pytest.mark.e2e

GOOD_PROFILE = """\
name: p
device: cpu
nproc_per_node: 2
config: configs/tiny.yaml
"""

# (id, profile yaml or None, extra args, local env, exit code, substrings of the message)
LOCAL_CASES = [
    ("unknown-profile", None, ["--profile", "cpuu"], {}, 2, ["unknown profile 'cpuu'", "did you mean 'cpu'"]),
    ("profile-file-missing", None, ["--profile", "/nonexistent/p.yaml"], {}, 2, ["does not exist", "fix:"]),
    ("profile-broken-yaml", "name: p\ndevice: [cpu\n", [], {}, 2, ["not valid YAML at line", "fix:"]),
    (
        "profile-unknown-key",
        GOOD_PROFILE + "nproc_per_nod: 2\n",
        [],
        {},
        2,
        ["unknown key nproc_per_nod", "did you mean 'nproc_per_node'"],
    ),
    (
        "profile-unknown-nested-key",
        GOOD_PROFILE + "torchrun:\n  rdzv_prot: 1\n",
        [],
        {},
        2,
        ["torchrun.rdzv_prot", "did you mean 'rdzv_port'"],
    ),
    (
        "profile-wrong-type",
        GOOD_PROFILE.replace("nproc_per_node: 2", "nproc_per_node: two"),
        [],
        {},
        2,
        ["nproc_per_node = 'two'", "set nproc_per_node to a valid value"],
    ),
    (
        "profile-bad-enum",
        GOOD_PROFILE.replace("device: cpu", "device: tpu"),
        [],
        {},
        2,
        ["device", "'cpu' or 'cuda'"],
    ),
    (
        "profile-missing-key",
        "name: p\ndevice: cpu\n",
        [],
        {},
        2,
        ["nproc_per_node is missing", "add `nproc_per_node"],
    ),
    (
        "profile-env-unknown",
        GOOD_PROFILE + "env:\n  NCCL_DEBUGG: INFO\n",
        [],
        {},
        2,
        ["NCCL_DEBUGG", "did you mean NCCL_DEBUG"],
    ),
    (
        "profile-secret-not-secret",
        GOOD_PROFILE + "secrets: [NCCL_DEBUG]\n",
        [],
        {},
        2,
        ["not a secret", "move it to env"],
    ),
    (
        "profile-hosts-vs-nodes",
        GOOD_PROFILE + "hosts: [{target: a}, {target: b}]\n",
        [],
        {},
        2,
        ["names 2 hosts but nodes=1", "one host per node"],
    ),
    ("profile-relative-python", GOOD_PROFILE + "host: {python: python3}\n", [], {}, 2, ["absolute path"]),
    (
        "config-missing",
        None,
        ["--config", "/nonexistent/c.yaml"],
        {},
        2,
        ["file not found", "fix: pass an existing YAML file"],
    ),
    (
        "config-unknown-key-set",
        None,
        ["--set", "train.stpes=3"],
        {},
        2,
        ["train.stpes", "did you mean 'train.steps'"],
    ),
    (
        "config-wrong-type",
        None,
        ["--set", "train.steps=abc"],
        {},
        2,
        ["train.steps = 'abc'", "valid integer", "fix: set train.steps"],
    ),
    (
        "config-bad-enum",
        None,
        ["--set", "model.attention=sparse"],
        {},
        2,
        ["model.attention", "'nsa' or 'dense'"],
    ),
    ("config-set-no-equals", None, ["--set", "train.steps"], {}, 2, ["section.key=value"]),
    (
        "config-global-batch",
        None,
        ["--set", "train.global_batch=999"],
        {},
        2,
        ["train.global_batch", "\n  fix: "],
    ),
    (
        "env-unknown",
        None,
        ["--env", "NCCL_DEBUGG=INFO"],
        {},
        2,
        ["unknown environment variable", "did you mean NCCL_DEBUG"],
    ),
    ("env-legacy-bucket", None, ["--env", "NSA_DDP_BUCKET_MB=25"], {}, 2, ["old trainer", "parallel"]),
    ("env-legacy-fa2", None, ["--env", "NSA_USE_FA2=1"], {}, 2, ["old trainer", "model.attention"]),
    ("env-legacy-gc", None, ["--env", "NSA_DDP_DISABLE_GC=1"], {}, 2, ["parallel.activation_checkpointing"]),
    ("env-legacy-config", None, ["--env", "CONFIG=configs/x.yaml"], {}, 2, ["--config PATH"]),
    ("env-bad-malloc", None, ["--env", "NSA_MALLOC=fast"], {}, 2, ["NSA_MALLOC", "auto, tcmalloc, system"]),
    ("env-ld-preload", None, ["--env", "LD_PRELOAD=/x.so"], {}, 2, ["LD_PRELOAD", "NSA_MALLOC"]),
    (
        "env-bad-enum",
        None,
        ["--env", "NCCL_DEBUG=LOUD"],
        {},
        2,
        ["NCCL_DEBUG='LOUD'", "VERSION, WARN, INFO, TRACE"],
    ),
    ("env-bad-int", None, ["--env", "OMP_NUM_THREADS=many"], {}, 2, ["must be an integer"]),
    ("env-not-assignment", None, ["--env", "NCCL_DEBUG"], {}, 2, ["NAME=VALUE"]),
    ("env-secret-by-value", None, ["--env", "HF_TOKEN=hf_abc123"], {}, 2, ["--secret HF_TOKEN"]),
    ("env-internal", None, ["--env", "MASTER_PORT=1234"], {}, 2, ["must not be set by hand", "torchrun"]),
    (
        "env-alloc-conf",
        None,
        ["--env", "PYTORCH_CUDA_ALLOC_CONF=expandable_segment:True"],
        {},
        2,
        ["did you mean expandable_segments"],
    ),
    (
        "secret-unset",
        None,
        ["--secret", "HF_TOKEN"],
        {"HF_TOKEN": None},
        2,
        ["not set in your local environment"],
    ),
    (
        "secret-not-secret",
        None,
        ["--secret", "NCCL_DEBUG"],
        {},
        2,
        ["is not a secret", "--env NCCL_DEBUG=VALUE"],
    ),
    ("name-bad-chars", None, ["--name", "a b"], {}, 2, ["not a valid run name", "letters, digits"]),
    ("inject-name-subshell", None, ["--name", "x$(touch /tmp/nsa-pwned)"], {}, 2, ["not a valid run name"]),
    ("inject-name-backtick", None, ["--name", "x`touch /tmp/nsa-pwned`"], {}, 2, ["not a valid run name"]),
    ("inject-name-semicolon", None, ["--name", "x;touch /tmp/nsa-pwned"], {}, 2, ["not a valid run name"]),
    ("inject-name-newline", None, ["--name", "x\ntouch /tmp/nsa-pwned"], {}, 2, ["not a valid run name"]),
    ("inject-name-quote", None, ["--name", "x'\"y"], {}, 2, ["not a valid run name"]),
    (
        "host-bad-port",
        None,
        ["--host", "ubuntu@1.2.3.4:notaport"],
        {},
        2,
        ["port 'notaport'", "user@host[:port]"],
    ),
    (
        "host-unsupported-option",
        None,
        ["--host", "ubuntu@1.2.3.4 -o ProxyCommand=x"],
        {},
        2,
        ["only -p PORT"],
    ),
    ("host-two-destinations", None, ["--host", "a b"], {}, 2, ["two destinations"]),
    (
        "ssh-config-missing",
        None,
        ["--host", "gpu", "--ssh-config", "/nonexistent/cfg"],
        {},
        2,
        ["no such file"],
    ),
    (
        "multinode-without-hosts",
        None,
        ["--profile", "2x8xh100"],
        {},
        2,
        ["has 2 nodes but no hosts", "--host"],
    ),
    ("host-count-mismatch", None, ["--host", "a", "--host", "b"], {}, 2, ["needs 1 host(s), got 2"]),
    ("python-relative", None, ["--host", "a", "--python", "python3"], {}, 2, ["must be an absolute path"]),
    (
        "workdir-local",
        None,
        ["--workdir", "relwd"],
        {},
        2,
        ["--workdir relwd is for SSH hosts", "drop --workdir"],
    ),
    ("logs-bad-n", None, None, {}, 2, ["Invalid value"]),
]


@pytest.mark.parametrize("case", LOCAL_CASES, ids=[c[0] for c in LOCAL_CASES])
def test_bad_input_exits_2_and_creates_nothing(case, tmp_path, monkeypatch, tmux_server):
    cid, profile_yaml, args, env, code, needles = case
    home = isolate(monkeypatch, tmp_path, tmux_server)
    for k, v in env.items():
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, v)
    if args is None:  # a CLI usage error rather than `up`
        res = invoke("logs", "-n", "minus-one")
    else:
        argv = ["up", *args]
        if profile_yaml is not None:
            p = tmp_path / "p.yaml"
            p.write_text(profile_yaml)
            argv += ["--profile", str(p)]
        if "--name" not in argv:
            argv += ["--name", f"bad-{cid}"]
        res = invoke(*argv)
    assert res.exit_code == code, res.output
    for needle in needles:
        assert needle in res.output, f"{needle!r} not in:\n{res.output}"
    assert "fix" in res.output.lower() or args is None
    assert not (PROJECT_ROOT / "runs" / f"bad-{cid}").exists()
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())
    assert not tmux_server.sessions
    assert not Path("/tmp/nsa-pwned").exists()


def test_console_script_exit_code_and_stderr():
    """The installed entry point (not just CliRunner) exits 2 and writes the fix to stderr."""
    exe = Path(sys.executable).parent / "nsa-launch"
    out = subprocess.run([str(exe), "up", "--profile", "cpuu"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "did you mean 'cpu'" in out.stderr and out.stdout == ""


def _host_case_files(sshd, tmp_path: Path) -> Path:
    """An ssh config with a host whose known_hosts holds a WRONG key, and one with a closed port."""
    wrong_kh = tmp_path / "wrong_known_hosts"
    fake_key = Path(str(sshd.key_path) + ".pub").read_text().split()[:2]  # a real key, not the host's
    wrong_kh.write_text(f"[{sshd.host}]:{sshd.port} {fake_key[0]} {fake_key[1]}\n")
    cfg = tmp_path / "ssh_config_bad"
    closed = 1  # nothing listens on port 1 of loopback
    cfg.write_text(
        f"Host wrongkey\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.key_path}\n  UserKnownHostsFile {wrong_kh}\n\n"
        f"Host closed\n  HostName 127.0.0.1\n  Port {closed}\n  User {sshd.user}\n  IdentityFile {sshd.key_path}\n"
        f"  UserKnownHostsFile {sshd.known_hosts}\n\n" + sshd.ssh_config.read_text()
    )
    return cfg


def test_bad_hosts_exit_with_fix_and_touch_nothing(sshd, tmp_path, monkeypatch, tmux_server):
    isolate(monkeypatch, tmp_path, tmux_server)
    cfg = _host_case_files(sshd, tmp_path)
    wd = tmp_path / "wd"
    common = ["--ssh-config", str(cfg), "--python", PYTHON, "--workdir", str(wd)]
    cases = [
        (
            "unknown-host-key",
            ["--host", f"{sshd.user}@{sshd.host}:{sshd.port} -i {sshd.key_path}"],
            2,
            ["not in", "--accept-new-host-key"],
        ),
        ("wrong-host-key", ["--host", "wrongkey"], 2, ["MISMATCH", "ssh-keygen -R"]),
        ("unreachable", ["--host", "closed"], 1, ["cannot reach", "check the host is up"]),
        ("alias-not-in-config", ["--host", "nosuchalias"], 2, ["not a Host in the ssh config", str(cfg)]),
        (
            "bad-user",
            ["--host", f"nosuchuser@{sshd.alias}"],
            2,
            ["authentication", "check the user and the key"],
        ),
        (
            "python-missing-on-host",
            ["--host", sshd.alias, "--python", "/nonexistent/bin/python"],
            2,
            ["does not run", "--python"],
        ),
        (
            "gpu-profile-on-cpu-host",
            ["--host", sshd.alias, "--profile", "1xa100"],
            2,
            ["expects 1 GPUs, the host shows 0", "pick the profile"],
        ),
    ]
    for cid, args, code, needles in cases:
        argv = ["up", *common, *args, "--name", f"bad-{cid}"]
        res = invoke(*argv)
        assert res.exit_code == code, f"{cid}: {res.output}"
        for needle in needles:
            assert needle in res.output, f"{cid}: {needle!r} not in:\n{res.output}"
        assert not wd.exists() or not (wd / "runs").exists(), f"{cid}: created {wd}"
        assert not tmux_server.sessions, cid

    # name collision: a run dir of that name already exists on the host (launched from elsewhere)
    (wd / "runs" / "taken").mkdir(parents=True)
    res = invoke("up", *common, "--host", sshd.alias, "--name", "taken")
    assert res.exit_code == 2 and "already exists there" in res.output and "another --name" in res.output
    assert list((wd / "runs" / "taken").iterdir()) == [] and not tmux_server.sessions
