"""What the source-tree checks (test_dist_sources.py, test_layers.py) share: the tree they
read, a walk over its files, and their report with its exit status."""
import os
import sys

SKIP_DIRS = {".git", "_build", "autom4te.cache"}


def tree_top():
    """The tree to check: the first argument, else $top_srcdir (set by `make check`), else
    the checkout this file is in."""
    if len(sys.argv) > 1:
        return sys.argv[1]
    return os.environ.get("top_srcdir",
                          os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def tree_files(top, skip=()):
    """(folder, name) of each file below top, leaving out folders named in SKIP_DIRS or
    skip at any depth."""
    for root, dirs, names in os.walk(top):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and d not in skip]
        for name in names:
            yield root, name


def report(errors, failed, ok):
    """Prints each of errors, then "FAIL: <how many> <failed>" and returns 1, or, with none,
    "ok: <ok>" and returns 0: the test's exit status."""
    for e in errors:
        print(e)
    if errors:
        print(f"FAIL: {len(errors)} {failed}")
        return 1
    print(f"ok: {ok}")
    return 0
