"""The fault scenarios of bench/recovery.py (issue 22): rot, handover, full_disk, concurrent, sigterm,
unchanged_pull.

Each returns one JSON-able dict with counts over `trials`. Every trial gets its own NSA_LAUNCH_HOME
and run dirs under a temp dir; the fake Prime API (tests/fixtures/fake_prime.py) where pods are
involved. Run through bench/recovery.py (`--only rot` ...); see its docstring for what each checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.fixtures.checkpoints import rot as _rot
from tests.fixtures.checkpoints import write_checkpoint as _ckpt

REPO = Path(__file__).resolve().parents[1]
RUN = "bench-fault"


def _home(d: Path) -> Path:
    os.environ["NSA_LAUNCH_HOME"] = str(d / "home")
    return d / "home"


def _record(rd: Path, host=None, **kw):
    from launcher.config.profiles import PROJECT_ROOT
    from launcher.run import registry
    from launcher.ssh.hosts import local_host

    node = registry.NodeRecord(host or local_host(), str(PROJECT_ROOT), sys.executable, str(rd))
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node], **kw)
    registry.save(rec)
    return rec


def _latest_ok() -> tuple[str | None, bool]:
    from launcher.recover.mirror import mirror_dir
    from nsa.runfiles import RunDir, verify_checkpoint

    ck = RunDir(mirror_dir(RUN)).latest_checkpoint()
    return (ck.name, verify_checkpoint(ck) is None) if ck else (None, False)


def rot(trials: int) -> dict:
    from launcher.recover.mirror import pull

    kept = reported = 0
    for _ in range(trials):
        with tempfile.TemporaryDirectory() as d:
            _home(Path(d))
            rd = Path(d) / "run"
            _ckpt(rd, 4, os.urandom(65536))
            ck8 = _ckpt(rd, 8, os.urandom(65536))
            rec = _record(rd)
            pull(rec, lambda _: None)
            _rot(ck8)
            a = pull(rec, lambda _: None)
            _rot(_ckpt(rd, 10, os.urandom(65536)))
            said: list[str] = []
            b = pull(rec, said.append)
            name, ok = _latest_ok()
            kept += a["pulled"] is None and b["pulled"] is None and name == "step-00000008" and ok
            reported += any(
                "host's step-00000010" in s and "the mirror keeps step-00000008" in s for s in said
            )
    return {
        "scenario": "rot",
        "trials": trials,
        "mirror_kept_newer_verified": kept,
        "corrupt_reported": reported,
    }


def handover(trials: int) -> dict:
    from launcher.config.profiles import load_profile
    from launcher.providers.pods import PodRecord, provision, save_pod
    from launcher.providers.prime import PrimeClient
    from launcher.recover.watcher import Watcher
    from launcher.run.control import fetch_status
    from launcher.ssh.hosts import parse_target
    from tests.fixtures.fake_prime import API_KEY, make_fake
    from tests.fixtures.sshd import free_port

    replacements = max_pods = right = 0
    for _ in range(trials):
        with tempfile.TemporaryDirectory() as d:
            _home(Path(d))
            fake = make_fake(0.0)
            os.environ.update(PRIME_API_KEY=API_KEY, PRIME_API_BASE_URL=fake.url)
            try:
                dead = parse_target(f"root@127.0.0.1:{free_port()}", str(fake.ssh_config))
                rec1 = _record(Path(d) / "run1", dead, provider="prime", pod_id="p-1")
                save_pod(
                    PodRecord("p-1", RUN, "CPU_NODE", 1, 0.1, time.time() - 60, [dead.target], time.time())
                )
                b = Watcher(RUN, lambda _: None, who="bench watcher B", lost_after_s=0.0)
                stale = fetch_status([rec1])[0]
                pod2, hosts = provision(PrimeClient(), load_profile("cpu"), "CPU_NODE", "nsa-bench", RUN,
                                        lambda _: None, 30, str(fake.ssh_config))  # fmt: skip
                rd2 = Path(d) / "run2"
                _ckpt(rd2, 4, os.urandom(4096))
                (rd2 / "exit_code").write_text("0\n")
                _record(rd2, hosts[0], provider="prime", pod_id=pod2.id)
                try:
                    st = b.tick(stale)
                finally:
                    b.close()
                replacements += len(b.replacements)
                max_pods = max(max_pods, len(fake.pods))
                right += st["state"] == "finished" and not b.replacements and list(fake.pods) == [pod2.id]
            finally:
                fake.close()
    return {"scenario": "handover", "trials": trials, "acted_on_new_pod": right,
            "replacements_by_second_watcher": replacements, "max_pods_listed": max_pods}  # fmt: skip


def full_disk(trials: int) -> dict:
    import json

    from launcher.recover.mirror import mirror_dir, pull

    nonzero = said_behind = tmp_left = 0
    for _ in range(trials):
        with tempfile.TemporaryDirectory() as d:
            _home(Path(d))
            rd = Path(d) / "run"
            _ckpt(rd, 4, os.urandom(4096))
            (rd / "exit_code").write_text("0\n")
            rec = _record(rd)
            pull(rec, lambda _: None)
            _ckpt(rd, 8, os.urandom(512 * 1024))
            code = (
                "import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                "resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))\n"
                "from launcher.cli import main; main()"
            )
            p = subprocess.run([sys.executable, "-c", code, "watch", "--run", RUN, "--poll", "0.2", "--json"],
                               capture_output=True, text=True, timeout=300, cwd=REPO)  # fmt: skip
            nonzero += p.returncode != 0
            m = json.loads(p.stdout or "{}").get("mirror") or {}
            said_behind += m.get("behind_steps") == 4 and "4 steps behind" in p.stderr
            tmp_left += any(x.name.startswith(".tmp-") for x in (mirror_dir(RUN) / "checkpoints").iterdir())
    return {"scenario": "full_disk", "trials": trials, "watch_exit_nonzero": nonzero,
            "said_steps_behind": said_behind, "tmp_dirs_left": tmp_left}  # fmt: skip


def _look(stop: threading.Event, counts: dict[str, int]) -> None:
    """Read `latest` until stopped; count the looks whose directory does not verify (a `latest` read
    just before a newer commit pruned its dir is the reader's race, not the writer's: re-read)."""
    from launcher.recover.mirror import mirror_dir
    from nsa.runfiles import verify_checkpoint

    ckdir = mirror_dir(RUN) / "checkpoints"
    while not stop.is_set():
        try:
            name = (ckdir / "latest").read_text().strip()
        except FileNotFoundError:
            continue
        counts["looks"] += 1
        if verify_checkpoint(ckdir / name) is not None and (ckdir / "latest").read_text().strip() == name:
            counts["bad"] += 1


def concurrent(trials: int) -> dict:
    from launcher.recover.mirror import pull

    looks = bad = failed_pulls = 0
    for _ in range(trials):
        with tempfile.TemporaryDirectory() as d:
            _home(Path(d))
            rd = Path(d) / "run"
            _ckpt(rd, 1, os.urandom(32768))
            rec = _record(rd)
            code = (
                "from launcher.run import registry; from launcher.recover.mirror import pull\n"
                f"for _ in range(8): pull(registry.load({RUN!r}), lambda _: None)"
            )
            other = subprocess.Popen(
                [sys.executable, "-c", code], cwd=REPO, stderr=subprocess.PIPE, text=True
            )
            stop = threading.Event()
            counts = {"looks": 0, "bad": 0}

            t = threading.Thread(target=_look, args=(stop, counts), daemon=True)
            t.start()
            for step in range(2, 10):
                _ckpt(rd, step, os.urandom(32768))
                pull(rec, lambda _: None)
            failed_pulls += other.wait(timeout=300) != 0
            stop.set()
            t.join()
            looks += counts["looks"]
            bad += counts["bad"]
    return {"scenario": "concurrent", "trials": trials, "latest_looks": looks,
            "latest_not_verifying": bad, "pull_processes_failed": failed_pulls}  # fmt: skip


def sigterm(trials: int) -> dict:
    """`watch` gets SIGTERM while its replacement pod is still PENDING: count pods left listed."""
    from launcher.providers.pods import PodRecord, save_pod
    from launcher.ssh.hosts import parse_target
    from tests.fixtures.fake_prime import API_KEY, make_fake
    from tests.fixtures.sshd import free_port

    orphans = exit_130 = rented = 0
    for _ in range(trials):
        with tempfile.TemporaryDirectory() as d:
            _home(Path(d))
            fake = make_fake(60.0)
            os.environ.update(PRIME_API_KEY=API_KEY, PRIME_API_BASE_URL=fake.url)
            try:
                dead = parse_target(f"root@127.0.0.1:{free_port()}", str(fake.ssh_config))
                _record(Path(d) / "run", dead, provider="prime", pod_id="p-old")
                save_pod(PodRecord("p-old", RUN, "CPU_NODE", 1, 0.1, time.time() - 60, [dead.target]))
                p = subprocess.Popen([sys.executable, "-c", "from launcher.cli import main; main()", "watch",
                                      "--run", RUN, "--lost-after", "0", "--poll", "0.2"],
                                     cwd=REPO, stderr=subprocess.DEVNULL)  # fmt: skip
                deadline = time.monotonic() + 60
                while not fake.pods and time.monotonic() < deadline and p.poll() is None:
                    time.sleep(0.05)
                rented += bool(fake.pods)
                p.terminate()
                exit_130 += p.wait(timeout=60) == 130
                orphans += len(fake.pods)
            finally:
                fake.close()
    return {"scenario": "sigterm", "trials": trials, "replacement_rented": rented, "watch_exit_130": exit_130,
            "pods_left_listed": orphans}  # fmt: skip


def unchanged_pull(trials: int, mb: int = 256) -> dict:
    """Seconds of a first pull of a `mb` MB checkpoint, and of the pulls after it with nothing new (the
    host hashes nothing newer than the mirror's; the mirror does not hash its unchanged copy)."""
    from launcher.recover.mirror import pull

    with tempfile.TemporaryDirectory() as d:
        _home(Path(d))
        rd = Path(d) / "run"
        _ckpt(rd, 4, os.urandom(mb << 20))
        rec = _record(rd)
        t0 = time.monotonic()
        pull(rec, lambda _: None)
        first = time.monotonic() - t0
        again = []
        for _ in range(trials):
            t0 = time.monotonic()
            pull(rec, lambda _: None)
            again.append(round(time.monotonic() - t0, 2))
    return {"scenario": "unchanged_pull", "checkpoint_mb": mb, "first_pull_s": round(first, 2),
            "unchanged_pull_s": again}  # fmt: skip


SCENARIOS = {
    "rot": rot,
    "handover": handover,
    "full_disk": full_disk,
    "concurrent": concurrent,
    "sigterm": sigterm,
    "unchanged_pull": unchanged_pull,
}
