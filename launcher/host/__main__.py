"""The host agent's entry point: `python -m launcher.host {start|status|kill|logs|tensorboard|free_port|wait_started|metrics|gpu_procs|kill_gpu_proc}`.

    cd <workdir> && PYTHONPATH=<workdir> <python> -m launcher.host COMMAND

Reads one JSON request on stdin, prints one JSON reply on stdout (`logs` prints log lines instead).
Nothing here reads arguments from the command line beyond the command, so no value ever passes
through a shell unquoted. launcher/ssh/remote.py is the one place that builds this command line.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any


def cmd_free_port(req: dict[str, Any]) -> dict[str, Any]:
    from launcher.core.ports import free_port

    return {"ok": True, "port": free_port(int(req.get("start", 29400)))}


def _commands() -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    from launcher.host.gpuprocs import cmd_gpu_procs, cmd_kill_gpu_proc
    from launcher.host.kill import cmd_kill
    from launcher.host.metrics import cmd_metrics
    from launcher.host.start import cmd_start
    from launcher.host.state import cmd_status, cmd_wait_started
    from launcher.host.tensorboard import cmd_tensorboard

    return {
        "start": cmd_start,
        "status": cmd_status,
        "kill": cmd_kill,
        "tensorboard": cmd_tensorboard,
        "free_port": cmd_free_port,
        "wait_started": cmd_wait_started,
        "metrics": cmd_metrics,
        "gpu_procs": cmd_gpu_procs,
        "kill_gpu_proc": cmd_kill_gpu_proc,
    }


COMMAND_NAMES = (
    "start", "status", "kill", "tensorboard", "free_port", "wait_started", "metrics", "gpu_procs", "kill_gpu_proc",
    "logs",
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in COMMAND_NAMES:
        print(
            json.dumps(
                {"ok": False, "error": f"usage: python -m launcher.host {{{','.join(COMMAND_NAMES)}}}"}
            )
        )
        return 2
    req = json.loads(sys.stdin.read() or "{}")
    if argv[0] == "logs":
        from launcher.host.logtail import follow_log

        with contextlib.suppress(BrokenPipeError):
            follow_log(req)
        return 0
    reply = _commands()[argv[0]](req)
    print(json.dumps(reply, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
