"""`python -m cleanup_scripts.storage`: list or download a bucket copy.

The command line of `cleanup_scripts.artifacts.storage` (see there), kept under its old name.
"""
from benchmark.errors import exit_on_user_error
from cleanup_scripts.artifacts.storage import main

if __name__ == "__main__":
    exit_on_user_error(main)
