"""The names the tests used to import from here, now in harness_admin.py (not a test).

The STUN encoding, the TURN clients and the peers moved to the one test library,
harness_admin.py. This module stays only for the tests not migrated yet (test_session_records.py,
test_proxy_protocol.py, tests/stunner): import harness_admin instead.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness_admin  # noqa: E402
from harness_admin import *  # noqa: E402,F401,F403
from harness_admin import Peer as Listener  # noqa: E402,F401


class Client(harness_admin.Client):
    """harness_admin's Client with this module's SECRET and REALM as they are when it is
    made (tests/stunner/test_stunner_cds.py rotates the secret by assigning SECRET here)."""

    def __init__(self, port, user="alice", **kw):
        kw.setdefault("secret", SECRET)
        kw.setdefault("realm", REALM)
        super().__init__(port, user, **kw)
