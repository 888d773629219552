"""Reaching a host from this machine: hosts.py (--host parsing), transport.py (local and paramiko
SSH with verified host keys, and the OpenSSH argv rsync shares), openssh.py (the shared master
connection for read-only calls), forward.py (the tunnel's local port forward), sync.py (rsync or
sftp). Nothing here knows what a run is; it must not import launcher.host's tmux side or torch.
"""
