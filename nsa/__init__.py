"""nsa: Llama-style language models with Native Sparse Attention, trained under torchrun.

Importing `nsa` itself is cheap and torch-free (so `nsa.runfiles` and `nsa.envvars` can be read by
the launcher on a laptop without torch); the subpackages `nsa.attention`, `nsa.model`, `nsa.data`
and `nsa.train` import torch.
"""

__version__ = "0.1.0"
