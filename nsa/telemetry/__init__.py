"""Run-dir telemetry for the trainer: heartbeats, events, metrics, TensorBoard, watchdog, manifest.

The writing half of the contract in nsa/runfiles.py (docs/run-dir.md). Importing this package does
not import torch; only the TensorBoard writer does, lazily.
"""

from nsa.telemetry.recorder import Recorder
from nsa.telemetry.watchdog import SignalHandlers, Watchdog, dump_stacks

__all__ = ["Recorder", "SignalHandlers", "Watchdog", "dump_stacks"]
