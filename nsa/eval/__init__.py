"""Evaluation of trained checkpoints: long-context passkey retrieval and loss by position (`nsa-eval`)."""
