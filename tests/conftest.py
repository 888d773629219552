"""Shared test fixtures: a real sshd on loopback, a private tmux server, and marker handling.

`sshd` and `tmux_server` start the real programs. Where one is missing, a test that needs it is
skipped with the install command as the reason, except in CI (CI=true), where a missing service is
a hard failure: CI must never go green by skipping the end-to-end half of the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.sshd import SSHDUnavailable, SSHServer, free_port
from tests.fixtures.tmux import TmuxUnavailable, private_tmux_server

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# In a pytest-xdist worker (scripts/test.sh runs two), one torch intra-op thread: torch's default of
# one per core puts two OpenMP teams on the same cores, and a team whose thread is descheduled makes
# every parallel op wait. On a busy 2-core VM a gradcheck of tiny tensors took 122 s with two threads
# and 7-12 s with one (bench/RESULTS.md "The test suite in two workers"). Set before any test imports
# torch; subprocesses that tests start inherit it, as torchrun's workers already get 1. A serial run
# keeps the default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# Triton's interpreter for every test process, set before any test module is collected: `@triton.jit`
# decides when a kernel module is imported whether it builds an interpreted function, by reading
# TRITON_INTERPRET then, and test modules outside tests/unit/attention/triton/ import kernel modules
# at collection too (the cost model's tests read the kernels' `_config`). Set any later, a kernel module
# imported first by such a module stays compiled-only, and every interpreter test of that process fails
# with "0 active drivers". It changes nothing else: the `auto` backend picks eager on CPU either way,
# and tests that need a process without it (gpucheck, the triton backend's ValueError on CPU, the
# compile test) start a subprocess without it.
os.environ["TRITON_INTERPRET"] = "1"


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true but a required service is missing: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def sshd() -> Iterator[SSHServer]:
    """A real OpenSSH server on 127.0.0.1 with throwaway keys; see tests/fixtures/sshd.py."""
    tmp = Path(tempfile.mkdtemp(prefix="nsa-sshd-"))
    server = SSHServer(tmpdir=tmp, port=free_port())
    try:
        server.setup()
    except SSHDUnavailable as e:
        _missing(str(e))
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # its keys, config and log: ~224 dirs had piled up in /tmp


@pytest.fixture
def tmux_server():
    """A real tmux server on a private socket, killed at teardown."""
    try:
        with private_tmux_server() as server:
            yield server
    except TmuxUnavailable as e:
        _missing(str(e))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [it for it in items if it.get_closest_marker("gpu")]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
        for it in gpu_items:
            it.add_marker(skip)


# Where the suite's wall time goes, per worker (scripts/test.sh sets NSA_TEST_TIMELINE for its main run):
# each pytest process (an xdist worker, or a serial run) appends one JSON line per test, its node id and
# wall start / end, to NSA_TEST_TIMELINE/<worker>.jsonl; the controller prints a summary at the end.
# Whether the two workers stay busy to the end and which file ends last is what packing the suite onto
# two cores needs (bench/RESULTS.md "suitetime4"); a fresh clone's run records it at no cost.
_TIMELINE = os.environ.get("NSA_TEST_TIMELINE")


def _timeline_name(config: pytest.Config) -> str:
    # xdist's own worker id, not the PYTEST_XDIST_WORKER variable, which a subprocess would inherit
    worker = getattr(config, "workerinput", {}).get("workerid")
    return worker or f"serial-{os.getpid()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    t0 = time.time()
    yield
    if _TIMELINE:
        rec = {"id": item.nodeid, "t0": round(t0, 3), "t1": round(time.time(), 3)}
        with open(Path(_TIMELINE) / f"{_timeline_name(item.config)}.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")


def timeline_spans(logs: list[Path]) -> dict[str, list[tuple[str, float, float, int]]]:
    """{worker: [(test file, start, end, tests)] in the order run} from NSA_TEST_TIMELINE's files."""
    out: dict[str, list] = {}
    for log in logs:
        spans: list[list] = []
        for line in log.read_text().splitlines() if log.exists() else []:
            r = json.loads(line)
            f = r["id"].split("::")[0]
            if spans and spans[-1][0] == f:
                spans[-1][2] = r["t1"]
                spans[-1][3] += 1
            else:
                spans.append([f, r["t0"], r["t1"], 1])
        out[log.stem] = [tuple(s) for s in spans]
    return out


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _TIMELINE or hasattr(config, "workerinput"):
        return
    d = Path(_TIMELINE)
    workers = timeline_spans(sorted(d.glob("gw*.jsonl")) if config.pluginmanager.hasplugin("dsession") else
                             [d / f"{_timeline_name(config)}.jsonl"])  # fmt: skip
    workers = {w: spans for w, spans in workers.items() if spans}
    if not workers:
        return
    t0 = min(s[1] for spans in workers.values() for s in spans)
    ends = {w: spans[-1][2] - t0 for w, spans in workers.items()}
    tr = terminalreporter
    tr.section("test timeline (NSA_TEST_TIMELINE)")
    for w in sorted(workers):
        busy = sum(s[2] - s[1] for s in workers[w])
        last = workers[w][-1]
        tr.write_line(
            f"{w}: {len(workers[w])} files, in tests {busy:.0f} s, done at {ends[w]:.0f} s; "
            f"last {last[0]} ({last[2] - last[1]:.0f} s)"
        )
    tr.write_line(
        f"tail: the first worker done {max(ends.values()) - min(ends.values()):.0f} s before the last"
    )
    longest = sorted((s[2] - s[1], s[0], w) for w, spans in workers.items() for s in spans)[-8:]
    tr.write_line("longest files: " + ", ".join(f"{f} {t:.0f} s ({w})" for t, f, w in reversed(longest)))
