"""The names the tests used to import from here, now in harness_admin.py (not a test).

The STUN encoding, the TURN clients and the peers moved to the one test library,
harness_admin.py, and every test on main imports it directly. This module is kept only for
the branches scale (bench/scale.py, scale_clients.py, test_scale*.py) and streams
(test_upgrade_streams.py), which still import it, until they land; then the coordinator
removes it. New code: import harness_admin.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness_admin  # noqa: E402
from harness_admin import *  # noqa: E402,F401,F403
from harness_admin import Peer as Listener  # noqa: E402,F401


class Client(harness_admin.Client):
    """harness_admin's Client with this module's SECRET and REALM as they are when it is
    made (a caller could rotate the secret by assigning SECRET here; harness_admin.Client
    takes secret= instead)."""

    def __init__(self, port, user="alice", **kw):
        kw.setdefault("secret", SECRET)
        kw.setdefault("realm", REALM)
        super().__init__(port, user, **kw)
