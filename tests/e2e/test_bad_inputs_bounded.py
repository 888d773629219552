"""Bad inputs that once got through (issue 21): each `nsa-launch up` exits 2 within 2 s, prints at most
2 KB, and creates nothing (no run dir, registry record or tmux session, no injected file).

The cases: a trailing newline in a name or env key (`$` matched before it), any control character in an
env value or a `--set` value, binary garbage and an alias bomb as YAML (config and profile), numbers
past their bounds, and a megabyte-long value whose error must quote only a little of it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from tests.e2e.launch_support import invoke, isolate

pytestmark = pytest.mark.e2e

PWNED = Path("/tmp/nsa-pwned-21")
# Nine levels of nine aliases: 9**9 nodes once expanded, a few hundred bytes of text.
ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
)
BOMB_CONFIG = ALIAS_BOMB + (PROJECT_ROOT / "configs" / "tiny.yaml").read_text().replace(
    "data:\n", "data:\n  paths: *a8\n", 1
)
GOOD_PROFILE = "name: p\ndevice: cpu\nnproc_per_node: 2\nconfig: configs/tiny.yaml\n"
GARBAGE = bytes(range(256)) * 8

# (id, files {name: bytes}, args (a file's name stands for its path), substrings of the message)
CASES = [
    ("name-trailing-newline", {}, ["--name", "badnl\n"], ["not a valid run name"]),
    ("env-key-newline", {}, ["--env", f"MYVAR\n=touch {PWNED}"], ["not a valid environment variable name"]),
    ("env-value-newline", {}, ["--env", "NCCL_DEBUG_SUBSYS=INIT\n"], ["a newline"]),
    ("env-value-tab", {}, ["--env", "NCCL_SOCKET_IFNAME=eth0\tx"], ["a tab"]),
    ("env-value-escape", {}, ["--env", "WANDB_PROJECT=a\x1b[2Jb"], ["control character"]),
    ("set-value-newline", {}, ["--set", "train.steps=5\n"], ["control character"]),
    ("set-key-newline", {}, ["--set", "train.steps\n=5"], ["is not a key path"]),
    ("config-binary", {"c.yaml": GARBAGE}, ["--config", "c.yaml"], ["c.yaml", "not a text file"]),
    (
        "config-alias-bomb",
        {"c.yaml": BOMB_CONFIG.encode()},
        ["--config", "c.yaml"],
        ["more than 20000 nodes"],
    ),
    ("profile-binary", {"p.yaml": GARBAGE}, ["--profile", "p.yaml"], ["p.yaml", "not a text file"]),
    (
        "profile-alias-bomb",
        {"p.yaml": (ALIAS_BOMB + GOOD_PROFILE + "overrides: *a8\n").encode()},
        ["--profile", "p.yaml"],
        ["more than 20000 nodes"],
    ),
    ("dim-huge", {}, ["--set", "model.dim=1e12"], ["model.dim", "less than or equal to 65536"]),
    ("grad-accum-huge", {}, ["--set", "train.grad_accum=1e9"], ["less than or equal to 4096"]),
    ("params-huge", {}, ["--set", "model.dim=65536", "--set", "model.n_layers=1024"], ["8 x 80 GB"]),
    ("omp-threads-huge", {}, ["--env", "OMP_NUM_THREADS=100000000000000000000"], ["OMP_NUM_THREADS"]),
    ("omp-threads-1025", {}, ["--env", "OMP_NUM_THREADS=1025"], ["at most 1024 (a thread count)"]),
    ("env-value-megabyte", {}, ["--env", "NCCL_SOCKET_IFNAME=" + "e" * 2**20 + "\n"], ["characters)"]),
    ("set-value-megabyte", {}, ["--set", "train.seed=" + "9" * 2**20], ["characters long"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_fast_short_and_creates_nothing(case, tmp_path, monkeypatch, tmux_server):
    cid, files, args, needles = case
    home = isolate(monkeypatch, tmp_path, tmux_server)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    argv = ["up", *(str(tmp_path / a) if a in files else a for a in args)]
    if "--name" not in argv:
        argv += ["--name", f"bad21-{cid}"]
    t0 = time.monotonic()
    res = invoke(*argv)
    took = time.monotonic() - t0
    assert res.exit_code == 2, res.output[:2000]
    for needle in needles:
        assert needle in res.output, f"{needle!r} not in:\n{res.output[:2000]}"
    assert "Traceback" not in res.output
    assert len(res.output.encode()) <= 2048, f"{len(res.output)} characters of output"
    assert took < 2.0, f"took {took:.2f} s"
    assert (
        not (PROJECT_ROOT / "runs" / f"bad21-{cid}").exists()
        and not (PROJECT_ROOT / "runs" / "badnl\n").exists()
    )
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())
    assert not tmux_server.sessions
    assert not PWNED.exists()
