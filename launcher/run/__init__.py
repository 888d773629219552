"""Runs already started from this machine: the registry of records, per-run locks, the commands on a
started run (status, logs, kill, restart, tunnel) and the Python API the CLI and the dashboard share."""
