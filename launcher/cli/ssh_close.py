"""`nsa-launch ssh-close`: close the shared SSH connections (ControlMaster) status and logs reuse."""

from __future__ import annotations

import click

from launcher.cli.app import Application


@click.command("ssh-close")
@click.pass_obj
def ssh_close(app: Application) -> None:
    """Close every shared SSH master connection of this registry now. (They also close by themselves
    after 5 idle minutes.)"""
    from launcher.ssh.openssh import PERSIST_S, stop_masters

    n = stop_masters()
    app.say(f"closed {n} SSH master connection(s); idle ones close by themselves after {PERSIST_S // 60} min")
