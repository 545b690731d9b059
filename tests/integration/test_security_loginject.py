"""Log injection through a USERNAME with line breaks (a known bug: kept out of make check).

A client holding valid credentials whose user id contains "\\n" or "\\r" (TURN REST user ids
come from the application, static usernames from the operator) gets its username written
verbatim into the text log by worker/turn.c ("allocation %u for %s on %s ...", DEBUG), so
it can forge whole log lines, e.g. one that reads as a [crit] from another process. The test
asserts that no forged line appears; it fails until the worker escapes control characters
in logged peer-supplied strings. Listed in EXTRA_DIST only, not in TESTS.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (Client, Daemon, check, config, error_code, free_port,  # noqa: E402
                           run_tests)

FORGED = "FORGED-LINE master[1] master: [crit] all workers dead"


def test_username_newline_forges_no_log_line(d):
    port = free_port()
    text = config(d, [("udp", port, "TURN-UDP", ["loopback"])], {"loopback": ["127.0.0.1"]},
                  loglevel="all:DEBUG")
    daemon = Daemon(d, text).start()
    try:
        for uid in ("x\n" + FORGED, "y\r\n" + FORGED, "z\r" + FORGED):
            c = Client(port, user=uid)
            code = error_code(c.allocate(expect="any")[3])
            c.close()
            check(code in (None, 400), "user id %r: %r" % (uid, code))
    finally:
        daemon.stop(check_clean=False)
    lines = daemon.stderr().replace("\r", "\n").splitlines()
    forged = [line for line in lines if line.startswith("FORGED-LINE")]
    check(not forged, "a username forged %d log line(s): %r" % (len(forged), forged[:3]))


if __name__ == "__main__":
    run_tests([test_username_newline_forges_no_log_line])
