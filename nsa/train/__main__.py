"""`python -m nsa.train ...` is `nsa-train ...` (the form torchrun's `-m` needs)."""

import sys

from nsa.train.cli import main

sys.exit(main())
