"""Keeping a run's progress safe: the local checkpoint mirror and its rsync transfers, the watcher
that pulls each new checkpoint, and the replacement of a lost provisioned pod."""
