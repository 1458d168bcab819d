"""`python -m experiments ...` is the `kvsim` command."""

from experiments.cli import run

if __name__ == "__main__":  # worker processes (spawn) import this module again as __mp_main__
    run()
