"""`runfiles.failure_cause`: one line naming why a run failed, from real torchrun/gloo output (a
2-rank tiny run whose rank 1 SIGKILLed itself, recorded in tests/assets/faults/)."""

from __future__ import annotations

import shutil
from pathlib import Path

from nsa.runfiles import RunDir, failure_cause, torchrun_root_cause

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "faults"


def _run_dir(
    tmp_path: Path, log: str = "kill9_train.log", events: str | None = "kill9_events.jsonl"
) -> RunDir:
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    shutil.copy(ASSETS / log, rd.train_log)
    if events:
        shutil.copy(ASSETS / events, rd.events)
    return rd


def test_sigkill_names_rank_signal_and_likely_oom(tmp_path) -> None:
    rd = _run_dir(tmp_path)
    assert torchrun_root_cause(rd.train_log.read_text()) == {"rank": 1, "host": "localhost", "exitcode": -9}
    cause = failure_cause(rd, exit_code=1)
    assert cause.startswith("rank 1 on localhost was killed by SIGKILL (exit code -9)"), cause
    assert "likely out of memory" in cause and "\n" not in cause
    # rank 0's gloo error is a consequence, not the cause
    assert "Connection closed by peer" not in cause


def test_exit_codes_and_the_ranks_own_event(tmp_path) -> None:
    rd = _run_dir(tmp_path, events=None)
    text = rd.train_log.read_text().replace(
        "exitcode  : -9 (pid: 21076)  (SIGKILL)", "exitcode  : 3 (pid: 21076)"
    )
    rd.append_event("stalled", step=2, rank=1, phase="forward_backward", idle_s=3.1)
    cause = failure_cause(rd, exit_code=1, log_text=text)
    assert "rank 1 on localhost exited with code 3 (stalled and aborted (telemetry.stall_abort))" in cause
    assert "stalled in phase 'forward_backward' at step 2" in cause


def test_without_torchrun_summary_the_first_error_event_speaks(tmp_path) -> None:
    rd = _run_dir(tmp_path)
    cause = failure_cause(rd, exit_code=1, log_text="")
    assert cause.startswith("rank 0: RuntimeError: [/__w/pytorch") and "Connection closed by peer" in cause
    assert failure_cause(RunDir(tmp_path / "empty"), exit_code=7, log_text="") == (
        "torchrun exited with code 7 and no rank said why; see train.log"
    )
    assert failure_cause(RunDir(tmp_path / "empty"), exit_code=0, log_text="") is None


def test_enospc_text_names_disk_full_path_and_mb_free(tmp_path) -> None:
    rd = _run_dir(tmp_path)
    bad = rd.root / "checkpoints" / ".tmp-step-00000004" / "optim.pt"
    text = f"OSError: [Errno 28] No space left on device: '{bad}'\n" + rd.train_log.read_text()
    cause = failure_cause(rd, exit_code=1, log_text=text)
    assert cause.startswith(f"disk full: {bad} (") and "MB free of" in cause and "Fix:" in cause


def test_a_signalled_rank_outranks_a_root_cause_that_is_its_peers_connection_error(tmp_path) -> None:
    """torchrun timestamps a SIGKILLed rank (no error file) when it notices it, so a peer's later gloo
    error can come out as the "Root Cause": the signalled rank under "Failures:" is the cause."""
    rd = _run_dir(tmp_path, events=None)
    text = rd.train_log.read_text()
    head, summary = text[: text.index("Failures:")], text[text.index("Failures:") :]
    swapped = (
        summary.replace("rank      : 0 (local_rank: 0)", "RANK_A")
        .replace("rank      : 1 (local_rank: 1)", "rank      : 0 (local_rank: 0)")
        .replace("RANK_A", "rank      : 1 (local_rank: 1)")
        .replace("exitcode  : -15 (pid: 21072)  (SIGTERM)", "EXIT_A")
        .replace("exitcode  : -9 (pid: 21076)  (SIGKILL)", "exitcode  : 1 (pid: 21072)")
        .replace("EXIT_A", "exitcode  : -9 (pid: 21076)  (SIGKILL)")
    )
    assert "Root Cause (first observed failure):\n[0]:" in swapped and "exitcode  : 1 (pid" in swapped
    rd.train_log.write_text(head + swapped)
    assert torchrun_root_cause(rd.train_log.read_text()) == {"rank": 1, "host": "localhost", "exitcode": -9}
    assert failure_cause(rd, exit_code=1).startswith("rank 1 on localhost was killed by SIGKILL")
    # A root cause that is itself a signal, or a plain exit with no signalled peer, stays as torchrun said.
    rd.train_log.write_text(
        head + swapped.replace("exitcode  : -9 (pid: 21076)", "exitcode  : 1 (pid: 21076)")
    )
    assert torchrun_root_cause(rd.train_log.read_text())["rank"] == 0


def test_a_rank_that_exited_silently_is_explained_by_the_peer_that_said_why(tmp_path) -> None:
    """A NaN loss is all-reduced, every rank stops, only rank 0 writes the `error` event, and torchrun
    may name rank 1 first: the cause must still say "not finite" (it once said only "exit 1")."""
    rd = _run_dir(tmp_path, events=None)
    text = rd.train_log.read_text().replace(
        "exitcode  : -9 (pid: 21076)  (SIGKILL)", "exitcode  : 1 (pid: 21076)"
    )
    rd.append_event("error", step=3, rank=0, error="Diverged", message="loss nan is not finite at step 3")
    cause = failure_cause(rd, exit_code=1, log_text=text)
    assert cause.startswith("rank 1 on localhost exited with code 1 (runtime failure); rank 0: "), cause
    assert "not finite at step 3" in cause


def test_a_stalled_rank_outranks_a_root_cause_that_is_its_peers_connection_error(tmp_path) -> None:
    """The summary a CI run printed: the watchdog aborted rank 1 (exit 3), rank 0 blocked in the
    all-reduce failed with "Connection closed by peer" (exit 1) in the same second, and torchrun named
    rank 0 the root cause. The stalled rank is the cause (a bad-input exit 2 likewise)."""
    rd = _run_dir(tmp_path, log="stall_summary.log", events=None)
    text = rd.train_log.read_text()
    assert torchrun_root_cause(text) == {"rank": 1, "host": "localhost", "exitcode": 3}
    rd.append_event("stalled", step=2, rank=0, phase="forward_backward", idle_s=3.4)
    rd.append_event("stalled", step=2, rank=1, phase="forward_backward", idle_s=3.1)
    cause = failure_cause(rd, exit_code=1)
    assert cause.startswith("rank 1 on localhost exited with code 3 (stalled and aborted"), cause
    bad = text.replace("exitcode  : 3 (pid: 23468)", "exitcode  : 2 (pid: 23468)")
    assert torchrun_root_cause(bad)["exitcode"] == 2
    # Two plain runtime failures: torchrun's root cause stands.
    plain = text.replace("exitcode  : 3 (pid: 23468)", "exitcode  : 1 (pid: 23468)")
    assert torchrun_root_cause(plain) == {"rank": 0, "host": "localhost", "exitcode": 1}


def test_an_error_event_without_a_rank_is_the_trainers(tmp_path) -> None:
    """An error written before the rank is known (or by a process without one) is "the trainer's",
    not "rank None"'s, both as the first error and as the peer that said why."""
    rd = _run_dir(tmp_path, events=None)
    rd.append_event("error", step=0, error="ValueError: bad data")
    cause = failure_cause(rd, exit_code=1, log_text="")
    assert cause == "the trainer: ValueError: bad data at step 0", cause
    text = rd.train_log.read_text().replace(
        "exitcode  : -9 (pid: 21076)  (SIGKILL)", "exitcode  : 1 (pid: 21076)"
    )
    cause = failure_cause(rd, exit_code=1, log_text=text)
    assert "; the trainer: ValueError: bad data at step 0" in cause and "None" not in cause, cause
