#!/usr/bin/python3
"""The worker's layers point one way (docs/architecture.md, "Worker layers").

Every file of worker/ belongs to one layer; a file may include a worker header of its own
layer or of a layer below, never one above, and the pipeline's private header
(relay_priv.h) is the pipeline's own. A file this test cannot place fails it too: a new
file names its layer here. Outside worker/, only worker/worker.h is the worker's API (the
unit tests and the fuzz harnesses, which drive the layers directly, are not checked).

Run by `make check`; with a directory argument it checks that tree instead."""
import os
import re
import sys

from tree_check import report, tree_files, tree_top

# Bottom to top; a header and the .c files that implement it share a layer.
LAYERS = [
    ("leaves", ["wheel.h", "wheel.c", "portpool.h", "portpool.c", "ratelimit.h",
                "ratelimit.c", "sockbuf.h", "wake.h", "wake.c", "worker.h"]),
    ("core", ["wk.h", "addr.c", "ctlq.c"]),
    ("table", ["table.h", "table.c"]),
    ("transport", ["transport.h", "stream.h", "udp.c", "tcp.c", "tls.c", "dtls.c",
                   "proxyproto.c", "pipe.c", "budget.c", "fdstore.c", "client.c", "dtlslinger.h",
                   "dtlslinger.c"]),
    ("pipeline", ["relay.h", "relay_priv.h", "relay.c", "relaysock.c", "shortcut.c",
                  "handover.c", "sibling.c", "self.c", "peer.c", "fastpath.c"]),
    ("turn", ["turn.h", "unauth.h", "authfail.h", "turn.c", "auth.c", "unauth.c",
              "authfail.c", "tcprelay.c"]),
    ("process", ["lifecycle.h", "worker.c", "adopt.c", "park.c", "linger.c", "relayho.h",
                 "relayho.c", "recflush.h", "recflush.c"]),
]
PRIVATE = {"relay_priv.h": "pipeline"}
PUBLIC = {"worker.h"}  # what the rest of the daemon may include
SKIP_DIRS = {"tests", "fuzz"}    # besides tree_check's
INCLUDE = re.compile(r'^\s*#\s*include\s+"worker/([^"]+)"', re.M)


def rank_of():
    rank = {}
    for i, (name, files) in enumerate(LAYERS):
        for f in files:
            rank[f] = (i, name)
    return rank


def check(top):
    rank = rank_of()
    errors = []
    wdir = os.path.join(top, "worker")
    for f in sorted(os.listdir(wdir)):
        if not f.endswith((".c", ".h")):
            continue
        if f not in rank:
            errors.append(f"worker/{f}: in no layer (name it in tests/unit/test_layers.py)")
            continue
        mine, layer = rank[f]
        with open(os.path.join(wdir, f), encoding="utf-8") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            if inc not in rank:
                errors.append(f"worker/{f}: includes worker/{inc}, which is in no layer")
                continue
            theirs, their_layer = rank[inc]
            if theirs > mine:
                errors.append(f"worker/{f} ({layer}) includes worker/{inc} "
                              f"({their_layer}): a layer above")
            if inc in PRIVATE and PRIVATE[inc] != layer:
                errors.append(f"worker/{f} ({layer}) includes worker/{inc}, "
                              f"the {PRIVATE[inc]}'s private header")
    for root, f in tree_files(top, SKIP_DIRS):
        if os.path.relpath(root, top) == "worker" or not f.endswith((".c", ".h")):
            continue
        path = os.path.join(root, f)
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            if inc not in PUBLIC:
                errors.append(f"{os.path.relpath(path, top)}: includes worker/{inc} "
                              "(only worker/worker.h is for outside worker/)")
    return errors


def main():
    n = sum(len(files) for _, files in LAYERS)
    return report(check(tree_top()), "include(s) against the worker's layers",
                  f"{n} worker files in {len(LAYERS)} layers, every include points down")


if __name__ == "__main__":
    sys.exit(main())
