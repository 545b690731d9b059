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
and exit 0 when every cell meets it; attacks.Probes with stop_on_fail (--smoke) runs no
probe after a failed one, and without it runs them all.
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
    """attacks.Probes over a made-up probe whose second call fails (no server, no pacing)."""
    saved = attacks.probe
    attacks.probe = lambda kind, port, i: (i != 1, 0.0)
    fails = []
    try:
        for stop, want in ((True, 2), (False, 5)):
            p = attacks.Probes("tcp", 0, 5, 0.0, stop_on_fail=stop)
            p.run()
            if len(p.res) != want:
                fails.append(f"control Probes(stop_on_fail={stop}): {len(p.res)} probes run"
                             f" (expected {want})")
    finally:
        attacks.probe = saved
    return fails


if __name__ == "__main__":
    sys.exit(main())
