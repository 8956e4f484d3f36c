"""`python -m cleanup_scripts.download`: download the benchmark's official artifacts.

The command line of `cleanup_scripts.artifacts.download` (see there), kept under its old name.
"""
from benchmark.errors import exit_on_user_error
from cleanup_scripts.artifacts.download import main

if __name__ == "__main__":
    exit_on_user_error(main)
