"""The host agent's pieces that need no tmux: the wrapper script, log tails, GPU parsing, process tags."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from launcher.host import gpu, kill, logtail, procs, wrapper


def test_wrapper_keeps_values_literal_and_the_true_exit_code(tmp_path):
    rd = tmp_path / "run $(x) 'q'"
    rd.mkdir()
    out = tmp_path / "out.txt"
    hostile = 'a\'b "c" $(touch PWNED) `touch PWNED` ; echo x\nline2'
    script = (
        "import os,sys; open(sys.argv[1],'w').write(os.environ['NCCL_SOCKET_IFNAME'] + '|' + "
        "os.environ['NSA_RUN_ID'] + '|' + ' '.join(sys.argv[2:])); print('hello'); sys.exit(3)"
    )
    req = {
        "run": "r1",
        "run_dir": str(rd),
        "workdir": str(tmp_path),
        "argv": [sys.executable, "-c", script, str(out)],
        "env": {"NCCL_SOCKET_IFNAME": hostile},
    }
    (rd / "launch.sh").write_text(wrapper.wrapper_script(req))
    p = subprocess.run(
        ["bash", str(rd / "launch.sh"), "--resume"], capture_output=True, text=True, cwd=tmp_path
    )
    assert p.returncode == 3  # pipefail through tee: the trainer's code, not tee's 0
    assert (rd / "exit_code").read_text() == "3\n"
    assert out.read_text() == f"{hostile}|r1|--resume"
    log = (rd / "train.log").read_text()
    assert "hello" in log and "torchrun exited with 3" in log
    assert not (tmp_path / "PWNED").exists()


def test_log_tail_reads_only_the_end(tmp_path):
    f = tmp_path / "train.log"
    with open(f, "w") as fh:
        for i in range(200_000):
            fh.write(f"line {i}\n")
    assert logtail.log_tail(f, 3) == ["line 199997", "line 199998", "line 199999"]
    assert logtail.log_tail(f, 0) == []
    assert logtail.log_tail(tmp_path / "missing", 5) == []


def test_gpu_parsing_with_a_fake_nvidia_smi(tmp_path, monkeypatch):
    """A FAKE nvidia-smi (no GPU can run here): odd fields become None, never an exception."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        '#!/bin/sh\ncase "$1" in --query-gpu*) printf \'index, name, utilization.gpu [%%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W]\\n0, NVIDIA A100-SXM4-80GB, 97, 35000, 81920, 61, 312.5\\n'
        "1, NVIDIA A100-SXM4-80GB, [N/A], 10, 81920, [Not Supported], \\ngarbage\\n';;\n"
        "--query-compute-apps*) printf '4242, 35000\\n';; esac\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    g = gpu.gpus()
    assert (
        len(g) == 2
        and g[0]["util_pct"] == 97.0
        and g[0]["mem_used_mb"] == 35000.0
        and g[0]["power_w"] == 312.5
    )
    assert g[1]["util_pct"] is None and g[1]["temp_c"] is None and g[1]["power_w"] is None
    assert gpu.gpu_pids() == {4242: 35000.0}


def test_tagged_processes_found_and_killed_even_in_new_sessions(tmp_path):
    tag = str(tmp_path / "run")
    env = {**os.environ, procs.TAG: tag}
    code = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    p = subprocess.Popen(
        [sys.executable, "-c", code], env=env, start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline().strip() == "ready"  # SIGTERM is ignored from here on
        found = procs.run_pids(tag, None)
        assert p.pid in found
        left = procs.term_then_kill(lambda: procs.run_pids(tag, None), grace_s=0.3)
        assert left == set()
        assert p.wait(timeout=5) == -9  # it ignored SIGTERM, so SIGKILL ended it
    finally:
        if p.poll() is None:
            p.kill()


def test_kill_reports_a_pid_still_holding_gpu_memory(tmp_path, monkeypatch):
    """A FAKE nvidia-smi (no GPU here) that keeps listing one of the run's PIDs as holding memory:
    kill must not claim success, and must name the PID."""
    tag = str(tmp_path / "run")
    os.makedirs(tag)
    code = "import time; print('ready', flush=True); time.sleep(60)"
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, procs.TAG: tag},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        fake = tmp_path / "bin" / "nvidia-smi"
        fake.parent.mkdir()
        fake.write_text(f"#!/bin/sh\ncase \"$1\" in --query-compute-apps*) echo '{p.pid}, 35000';; esac\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
        res = kill.cmd_kill(
            {"run": "r", "run_dir": tag, "grace_s": 1, "tmux_socket": f"nsa-unit-{os.getpid()}"}
        )
        assert p.wait(timeout=5) < 0  # the process itself was stopped
        assert (
            res["killed"] is False and res["gpu_pids"] == [p.pid] and "GPU memory held by" in res["message"]
        )
    finally:
        if p.poll() is None:
            p.kill()


def test_error_lines_skip_torchrun_boilerplate():
    log = [
        "[nsa-launch] start: python -m torch.distributed.run ...",
        "nsa-train: NSA_FAULT='bogus': unknown kind 'bogus'. Fix: unset NSA_FAULT",
        '  File "/x/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 367, in wrapper',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "  error_file: <N/A>",
        "[nsa-launch] torchrun exited with 1",
    ]
    assert logtail.error_lines(log) == [log[1]]
