"""`up`: plan.py validates everything locally (exit 2 before any host is touched), preflight.py
checks each host read-only, execute.py syncs, builds the host env, starts the run through the agent
and waits for its first heartbeat, rolling back what it started on failure; manifest.py is what a
run records. Never imports torch.
"""
