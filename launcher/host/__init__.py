"""What runs ON the host: the agent (`python -m launcher.host COMMAND`, one JSON request on stdin, one
JSON reply on stdout) and its parts: tmux.py (the only code that touches tmux), wrapper.py, start.py,
state.py (run states, ETA), kill.py, tensorboard.py, metrics.py, logtail.py, procs.py, gpu.py.

Standard library + libtmux + nsa.runfiles only: the host may have nothing else, and the launcher's
laptop side imports from here only what needs none of it (tmux.session_name, logtail.error_lines).
"""
