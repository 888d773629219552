"""`up`, steps 3-7: carry out a Plan on its host(s).

Owns the order (preflight every host, sync, host env, rendezvous port, start through the agent,
record) and the rollback: when a later step fails, what was started is killed, so nothing is left
half-started. Step 8, the first-heartbeat wait, lives in launcher/run/control.py with the other calls on
a started run (restart waits the same way) and is re-exported here; this module imports control,
never the other way round. It must not parse CLI arguments, talk to tmux (the agent does) or import
torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from launcher.config.profiles import PROJECT_ROOT, kill_env, profile_file
from launcher.core.errors import LaunchError
from launcher.launch.manifest import manifest, torchrun_argv
from launcher.launch.plan import INPUT_CONFIG, Plan
from launcher.launch.preflight import preflight
from launcher.run import registry
from launcher.run.control import kill_nodes, wait_first_heartbeat  # noqa: F401 (re-exported: up, recovery)
from launcher.run.registry import NodeRecord, RunRecord
from launcher.ssh.remote import agent_call, transport_for
from launcher.ssh.transport import SSHTransport


def execute(
    plan: Plan,
    say: Callable[[str], None] = print,
    on_sync_progress: Callable[[int], None] | None = None,
    before_start: Callable[[Any, NodeRecord], None] | None = None,
) -> tuple[RunRecord, float]:
    """Do the run on its host(s). Returns the record and the seconds until torchrun was started.

    `before_start(transport, node)` runs once per node after sync and host env, before the start (a
    restore on a replacement host puts the mirrored run dir there)."""
    from launcher.launch.hostenv import ensure_python
    from launcher.ssh.sync import sync

    t0 = time.monotonic()
    transports = [transport_for(h, accept_new_host_key=plan.opts.accept_new_host_key) for h in plan.hosts]
    for t in transports:
        if getattr(t, "recorded_host_key", None):
            say(t.recorded_host_key)  # type: ignore[attr-defined]
    facts = []
    for i, t in enumerate(transports):
        facts.append(preflight(t, plan, i))
        say(f"preflight ok on {t.label}: python {facts[i]['python']}, {facts[i]['gpu_found']}")
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
        python = ensure_python(
            t,
            workdir,
            plan.profile.host,
            plan.pythons[i],
            say,
            device=plan.profile.device,
            probe=facts[i].get("probe"),
        )
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
    from launcher.launch import netcheck

    check = plan.opts.allreduce_check
    if check or (check is None and netcheck.wanted(plan.profile)):
        r = netcheck.run_check(
            transports, [n.python for n in nodes], [n.workdir for n in nodes], plan.profile, plan.env, rdzv
        )
        say(netcheck.describe(r))
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
        workdir_arg=plan.opts.workdir,
        profile_file=profile_file(plan.opts.profile),
    )
    if before_start is not None:
        for t, node in zip(transports, nodes):
            before_start(t, node)
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
                # The kill grace reaches the trainer and torchrun; a value the user set wins.
                "env": {**kill_env(plan.profile.kill_grace_s), **plan.env},
                "secrets": plan.secret_values,
                "tmux_socket": plan.tmux_socket,
                "resume": plan.opts.resume,
                "from_scratch": plan.opts.from_scratch,
                "max_restarts": max_restarts(plan),
                "manifest": manifest(plan, i, t.label, argv),
                "files": {INPUT_CONFIG: plan.config_text},
            }
            with _ctrl_c_after():
                reply = agent_call(t, node.workdir, node.python, "start", req, timeout=60)
                if reply.get("ok"):
                    started.append(i)
            if not reply.get("ok"):
                raise LaunchError(f"{t.label}: {reply.get('error')}", reply.get("fix", ""))
        registry.save(rec)
    except BaseException as e:
        kill_nodes(rec, [nodes[i] for i in started])
        if isinstance(e, KeyboardInterrupt) and started:
            where = ", ".join(nodes[i].label for i in started)
            raise KeyboardInterrupt(
                f"interrupted while starting {plan.run}: stopped it again on {where} (verified), so "
                f"nothing of it runs; its run dir stays there ({nodes[0].run_dir})"
            ) from None
        raise
    return rec, time.monotonic() - t0


class _ctrl_c_after:
    """Hold a Ctrl-C (SIGINT) until the block is done, then raise it.

    The agent's `start` runs on the host in a process of its own. A Ctrl-C that abandoned the wait
    for its reply left the run started there and unknown here (no record: `kill` could not name it),
    a training run nobody could see or stop; held, the start completes, lands in `started`, and the
    rollback above stops it. The wait is bounded by the call's timeout (60 s)."""

    def __enter__(self) -> None:
        import signal
        import threading

        self.got = False
        self.held = threading.current_thread() is threading.main_thread()  # signals reach it only
        if self.held:
            self.old = signal.signal(signal.SIGINT, self._hold)

    def _hold(self, signum: int, frame: object) -> None:
        self.got = True

    def __exit__(self, exc_type: object, *rest: object) -> None:
        import signal

        if self.held:
            signal.signal(signal.SIGINT, self.old)
        if self.got and exc_type is None:
            raise KeyboardInterrupt


def max_restarts(plan: Plan) -> int:
    """`up --max-restarts`, else the profile's."""
    n = plan.opts.max_restarts
    return plan.profile.max_restarts if n is None else n
