"""`python -m cleanup_scripts.upload`: upload a dataset to a bucket.

The command line of `cleanup_scripts.artifacts.upload` (see there), kept under its old name.
"""
from benchmark.errors import exit_on_user_error
from cleanup_scripts.artifacts.upload import main

if __name__ == "__main__":
    exit_on_user_error(main)
