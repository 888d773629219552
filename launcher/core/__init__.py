"""The launcher's base layer, imported by every other part: errors and exit codes, the one formatter
for people, free local ports. It imports nothing of launcher, and this file stays empty of imports:
the host agent imports core.ports (stdlib only) on every host."""
