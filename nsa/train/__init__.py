"""Training: config schema (torch-free), trainer loop, parallelism, LR schedule, checkpoints.

Importing this package must not import torch: the launcher imports `nsa.train.config` on machines
without it. The torch-using modules (trainer, parallelize, ckpt, cli) are imported by name only.

    nsa-train --config configs/tiny.yaml --run-dir runs/tiny
    torchrun --nproc_per_node 2 -m nsa.train --config configs/tiny.yaml --run-dir runs/tiny
"""
