import sys

from nsa.eval.cli import main

sys.exit(main())
