#!/usr/bin/python3
"""bench/test_attacks.py: bench/attacks.py's smoke mode (make check), so the script can't rot.

Runs every attack of issue 36 at a fiftieth of its count against the built turngated with 5
probes each (no coturn, no timing asserted: a smoke probe waits up to 12 s for its answer):
the script must exit 0, which it does only when every probe completed, and print one table
row per attack and rate, each cell with its probe count, and the guessing attack must have
got its nonce. The figures themselves are only meaningful in a full run
(docs/performance.md).

Controls without a server: attacks.main() over cells made up here must exit 1 and name
the cell that missed the target (4 of 5 probes in --smoke; a p99 of 300 ms in a full run),
and exit 0 when every cell meets it; attacks.Probes with stop_on_fail (--smoke) tries a
failed probe once more and runs none after one that failed twice, and without it runs them
all once.
"""
import contextlib
import io
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ATTACKS = ("TLS partial hellos", "DTLS stalled hellos", "idle TCP connections",
           "at fd limit", "guessing at", "Allocates, 200 ports")


def main():
    builddir = os.environ.get("top_builddir", os.getcwd())
    # A hang guard only: the run takes about 16 s; a server that answers no probe adds one
    # probe timeout (12 s) per cell, as a cell stops probing at its first failure.
    r = subprocess.run([sys.executable, os.path.join(HERE, "attacks.py"), "--smoke",
                        "--builddir", builddir], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    out = r.stdout.decode(errors="replace")
    print(out)
    fails = []
    if r.returncode != 0:
        fails.append(f"attacks.py --smoke exited {r.returncode}")
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and "/5 |" in ln]
    for what in ATTACKS:
        if sum(what in ln for ln in rows) != 1:
            fails.append(f"no single table row for {what!r}")
    if "no nonce" in out:
        fails.append("the guessing attack got no nonce")
    fails += control()
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


def control():
    """attacks.main()'s exit status and message over made-up cells (no server, no network)."""
    sys.path.insert(0, HERE)
    import attacks

    def run(argv, cell):
        err = io.StringIO()
        saved = (sys.argv, attacks.run_cell, attacks.capture_dtls_hello, attacks.make_cert)
        sys.argv = ["attacks.py"] + argv
        attacks.run_cell = lambda args, server, attack, mult: dict(
            cell, n=args.probes, count=1, cpu=0.0, wall=0.0, made=1, failed=0, held=0, note="")
        attacks.capture_dtls_hello = lambda: b""
        attacks.make_cert = lambda d: ("c.pem", "k.pem")
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                rc = attacks.main()
        finally:
            sys.argv, attacks.run_cell, attacks.capture_dtls_hello, attacks.make_cert = saved
        return rc, err.getvalue()

    fails = []
    good = {"ok": 5, "p50": 10.0, "p99": 20.0}
    cases = [
        (["--smoke", "--attacks", "idle,tls"], good, 0, None),
        (["--smoke", "--attacks", "idle,tls"], dict(good, ok=4), 1, "turngate idle 1x"),
        (["--smoke", "--attacks", "guess"], dict(good, p99=300.0), 0, None),
        (["--servers", "turngate", "--attacks", "quota", "--rates", "10", "--probes", "5"],
         dict(good, p99=300.0), 1, "turngate quota 10x"),
    ]
    for argv, cell, want_rc, want_msg in cases:
        rc, err = run(argv, cell)
        if rc != want_rc or (want_msg and want_msg not in err):
            fails.append(f"control {' '.join(argv)} with {cell}: exit {rc}, {err.strip()!r}"
                         f" (expected exit {want_rc}" + (f" naming {want_msg!r})" if want_msg
                                                          else ")"))
    fails += probes_control(attacks)
    return fails


def probes_control(attacks):
    """attacks.Probes over made-up probes (no server, no pacing): probe 1 always fails, or
    fails its first try only. With stop_on_fail (--smoke) a failed probe is tried once more
    and none follows one that failed twice; without it every probe runs once."""
    saved = attacks.probe
    fails = []
    try:
        for once in (False, True):
            tries = []

            def fake(kind, port, i, why=None):
                tries.append(i)
                ok = i != 1 or (once and tries.count(1) > 1)
                if not ok and why is not None:
                    why.append(f"probe {i}: made up")
                return ok, 0.0
            attacks.probe = fake
            for stop in (True, False):
                del tries[:]
                p = attacks.Probes("tcp", 0, 5, 0.0, stop_on_fail=stop)
                p.run()
                want = (5 if once else 2) if stop else 5
                want_ok = (5 if once else 1) if stop else 4
                got_ok = sum(1 for good, _ in p.res if good)
                if len(p.res) != want or got_ok != want_ok or not p.why:
                    fails.append(f"control Probes(stop_on_fail={stop}), probe 1 failing "
                                 f"{'once' if once else 'always'}: {len(p.res)} probes run, "
                                 f"{got_ok} ok, why {p.why} (expected {want}, {want_ok} ok)")
    finally:
        attacks.probe = saved
    return fails


if __name__ == "__main__":
    sys.exit(main())
