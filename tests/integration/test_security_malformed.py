"""Requests a client sends by mistake, against the real daemon: fixed-size attributes of
the wrong length (RFC 8489 6.3.1.1 / RFC 8656 18: 400, never a success that reads a 0-length
LIFETIME as "no LIFETIME"), and a NONCE the server never issued, whether or not the
MESSAGE-INTEGRITY verifies (RFC 8489 9.2.4: the nonce is checked before the credentials,
438 with a fresh nonce, so the client retries once instead of giving up on a 401)."""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (ALLOCATE, A_CHANNEL, A_ERROR, A_EVEN_PORT, A_LIFETIME,  # noqa: E402
                           A_NONCE, A_REALM, A_TRANSPORT, A_USERNAME, CHANNEL_BIND, REFRESH,
                           REQUEST, Client, build, check, error_code, run_tests)
from test_security_limits import start  # noqa: E402

A_DONT_FRAGMENT, A_REQ_FAMILY, A_TOKEN = 0x001A, 0x0017, 0x0022
UDP = (A_TRANSPORT, bytes([17, 0, 0, 0]))
# An unauthenticated UDP answer carries its reason phrase only where the answer stays no
# larger than the request (reflection, test_security_amplify.py): a SOFTWARE attribute as
# real clients send makes room for the "Malformed ..." diagnostic checked here.
SOFTWARE = (0x8022, b"test_security_malformed/1.0 (room for the reason)")


def test_fixed_size_attributes_400(d):
    daemon, port = start(d)
    try:
        cases = [("LIFETIME of 0 bytes", [UDP, (A_LIFETIME, b"")]),
                 ("LIFETIME of 8 bytes", [UDP, (A_LIFETIME, struct.pack("!Q", 600))]),
                 ("REQUESTED-TRANSPORT of 0 bytes", [(A_TRANSPORT, b"")]),
                 ("EVEN-PORT of 4 bytes", [UDP, (A_EVEN_PORT, b"\0\0\0\0")]),
                 ("DONT-FRAGMENT of 4 bytes", [UDP, (A_DONT_FRAGMENT, b"\0\0\0\0")]),
                 ("REQUESTED-ADDRESS-FAMILY of 1 byte", [UDP, (A_REQ_FAMILY, b"\x01")]),
                 ("RESERVATION-TOKEN of 4 bytes", [UDP, (A_TOKEN, b"\0\0\0\1")])]
        c = Client(port)
        for what, attrs in cases:
            r = c.request(ALLOCATE, attrs + [SOFTWARE])
            check(error_code(r[3]) == 400, "Allocate with %s: %r" % (what, error_code(r[3])))
            reason = r[3][A_ERROR][0][4:].decode()
            check(reason.startswith("Malformed "), "%s: reason %r" % (what, reason))
        st = daemon.admin({"cmd": "allocations"})
        check(st.get("allocations", []) == [], "an allocation was made: %r" % (st,))
        # The same client allocates when the attributes are right, and a Refresh with a
        # 0-length LIFETIME neither refreshes nor deletes it.
        r = c.allocate([(A_LIFETIME, struct.pack("!I", 600))])
        r = c.request(REFRESH, [(A_LIFETIME, b"")])
        check(error_code(r[3]) == 400, "Refresh with LIFETIME of 0 bytes: %r"
              % error_code(r[3]))
        r = c.request(CHANNEL_BIND, [(A_CHANNEL, b"\x40\x00")])
        check(error_code(r[3]) == 400, "ChannelBind with CHANNEL-NUMBER of 2 bytes")
        r = c.request(REFRESH, [(A_LIFETIME, struct.pack("!I", 0))])
        check(error_code(r[3]) is None, "Refresh 0 after the malformed one: %r"
              % error_code(r[3]))
        c.close()
    finally:
        check(daemon.stop() == 0, "exit status")


def signed_allocate(c, nonce, key):
    tid = os.urandom(12)
    attrs = [UDP, (A_USERNAME, c.username.encode()), (A_REALM, b"sec.realm"),
             (A_NONCE, nonce)]
    return c.transact(build(ALLOCATE, REQUEST, tid, attrs, key), tid)


def test_foreign_nonce_438(d):
    daemon, port = start(d)
    try:
        c = Client(port)
        foreign = [b"obMatJos2AAABnever-issued-by-this-server",
                   b"0123456789abcdef0123456789abcdef", b"x"]
        for nonce in foreign:
            r = signed_allocate(c, nonce, c.key)
            check(r is not None, "no answer for nonce %r" % nonce)
            check(error_code(r[3]) == 438, "nonce %r with valid integrity: %r"
                  % (nonce, error_code(r[3])))
            fresh = r[3].get(A_NONCE, [None])[0]
            check(fresh and fresh != nonce, "438 without a fresh nonce")
            # Wrong credentials with a foreign nonce: 438 too (the nonce is checked
            # before the credentials, so the answer tells nothing about them).
            r = signed_allocate(c, nonce, b"\0" * 16)
            check(error_code(r[3]) == 438, "nonce %r with a wrong key: %r"
                  % (nonce, error_code(r[3])))
        # The client retries with the fresh nonce of the 438 and allocates.
        r = signed_allocate(c, foreign[0], c.key)
        r = signed_allocate(c, r[3][A_NONCE][0], c.key)
        check(error_code(r[3]) is None, "retry with the fresh nonce: %r" % error_code(r[3]))
        stats = daemon.admin({"cmd": "stats"})
        ctr = stats["counters"]
        print("nonce counters: %r" % {k: v for k, v in ctr.items() if "nonce" in k})
        c.close()
    finally:
        check(daemon.stop() == 0, "exit status")


if __name__ == "__main__":
    run_tests([test_fixed_size_attributes_400, test_foreign_nonce_438])
