"""`python -m cleanup_scripts.verify`: check a folder or a bucket copy against the official md5s.

The command line of `cleanup_scripts.artifacts.verify` (see there), kept under its old name.
"""
from benchmark.errors import exit_on_user_error
from cleanup_scripts.artifacts.verify import main

if __name__ == "__main__":
    exit_on_user_error(main)
