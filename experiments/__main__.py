"""`python -m experiments ...` is the `kvsim` command."""

import sys

from experiments.cli import main

if __name__ == "__main__":  # worker processes (spawn) import this module again as __mp_main__
    sys.exit(main())
