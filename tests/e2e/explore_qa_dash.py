import asyncio, os, time
import pytest
from launcher.dashboard import make_app
from launcher.dashboard.backend import LauncherBackend, Scope, WatchSettings
from launcher.run.api import resolve_run
from tests.e2e.launch_support import CPU1, PACED, PYTHON, invoke, isolate, run_processes

def text(app):
    return "\n".join("".join(s.text for s in strip) for strip in app.screen._compositor.render_strips())

async def test_explore(sshd, tmux_server, tmp_path, monkeypatch):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = "qd-ssh"
    res = invoke("up", *CPU1, "--host", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--python", PYTHON,
        "--workdir", str(tmp_path / "host"), "--name", run, "--set", "train.steps=3000", *PACED)
    assert res.exit_code == 0, res.output
    rec = resolve_run(run)
    app = make_app(LauncherBackend(Scope(run=run), WatchSettings(False)), refresh_s=0.5)
    t0 = time.monotonic()
    seen = []
    orig = app.notify
    def notify(message, *a, **k):
        seen.append(f"[{time.monotonic()-t0:.1f}s {k.get('severity','info')}] {k.get('title','')}: {message}")
        return orig(message, *a, **k)
    app.notify = notify
    def show(what):
        print(f"=== {what} ({time.monotonic()-t0:.1f}s)"); print(text(app))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            main = app.main
            while not (main.statuses.get(run, {}).get("step") or 0) > 2:
                await pilot.pause(0.2)
            await pilot.pause(2)
            show("running")
            await pilot.press("v", "v"); await pilot.pause(0.5); show("gpus pane")
            sshd.stop()
            while main.statuses.get(run, {}).get("state") != "lost":
                await pilot.pause(0.2)
            show("lost")
            for k in ("v", "v", "f", "f"):
                a = time.monotonic(); await pilot.press(k); print(f"key {k} took {time.monotonic()-a:.2f}s")
            await pilot.pause(3); show("lost +3s")
            await pilot.press("k"); await pilot.pause(0.3); await pilot.press("y")
            await pilot.pause(8); show("kill while lost +8s")
            await pilot.press("t"); await pilot.pause(8); show("tunnel while lost")
            await pilot.press("g"); await pilot.pause(5); show("gpu procs while lost"); await pilot.press("escape")
            sshd.start()
            a = time.monotonic()
            while main.statuses.get(run, {}).get("state") != "running":
                await pilot.pause(0.2)
            print(f"recovered after {time.monotonic()-a:.1f}s")
            await pilot.pause(3); show("recovered")
            await pilot.press("k"); await pilot.pause(0.3); await pilot.press("y")
            while main.statuses.get(run, {}).get("state") != "killed":
                await pilot.pause(0.2)
            await pilot.pause(3); show("killed +3s")
            await pilot.press("v", "v", "v"); await pilot.pause(0.5); show("after kill, pane")
    finally:
        print("\n".join(seen))
        sshd.start()
        invoke("kill", "--run", run)
        for pid in run_processes(rec.run_dir):
            os.kill(pid, 9)
