"""launcher: the `nsa-launch` CLI, its host agent and its dashboard.

Never imports torch: a laptop that only launches and watches runs needs no torch installed.
"""

__version__ = "0.1.0"
