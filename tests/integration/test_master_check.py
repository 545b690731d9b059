"""`turngated -c FILE -t`: exact output lines and exit statuses for valid and broken files."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import TURNGATED, check, config_yaml, run_tests  # noqa: E402


def run_check(d, name, text, prefix=""):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    # Run from the file's directory so diagnostics name it as given ("name").
    r = subprocess.run([TURNGATED, "-c", prefix + (path if prefix else name), "-t"], cwd=d,
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout


def good(d):
    return config_yaml(os.path.join(d, "admin.sock"),
                       [("udp", 3478, "TURN-UDP"), ("tcp", 3478, "TURN-TCP")])


def test_valid(d):
    rc, out = run_check(d, "ok.yaml", good(d))
    check((rc, out) == (0, "configuration ok\n"), (rc, out))
    # stunnerd's file:// form.
    rc, out = run_check(d, "ok2.yaml", good(d), prefix="file://")
    check((rc, out) == (0, "configuration ok\n"), (rc, out))
    # No -c: the embedded default.
    r = subprocess.run([TURNGATED, "-t"], capture_output=True, text=True, timeout=60)
    check((r.returncode, r.stdout) == (0, "configuration ok\n"), r)


def test_every_problem_reported(d):
    text = good(d).replace("port: 3478", "port: 70000", 1).replace("TURN-TCP", "TURN-FOO")
    rc, out = run_check(d, "bad.yaml", text)
    lines = out.splitlines()
    check(rc == 1, (rc, out))
    check(len(lines) == 2, out)
    check(lines[0].startswith("bad.yaml:") and
          lines[0].endswith(": listeners[0].port: 70000 is out of range (1..65535)"), lines)
    check(lines[1].startswith("bad.yaml:") and ": listeners[1].protocol: 'TURN-FOO' is not a "
          "listener protocol" in lines[1], lines)
    check("configuration ok" not in out, out)


def test_syntax_and_missing(d):
    rc, out = run_check(d, "syn.yaml", "version: v1\nlisteners: [\n")
    check(rc == 1 and out.startswith("syn.yaml:3:1: syntax error"), (rc, out))
    r = subprocess.run([TURNGATED, "-c", os.path.join(d, "missing.yaml"), "-t"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and r.stdout == os.path.join(d, "missing.yaml") +
          ": cannot read: No such file or directory\n", r)


def test_warning_only_is_ok(d):
    rc, out = run_check(d, "warn.yaml", good(d) + "bogus: 1\n")
    lines = out.splitlines()
    check(rc == 0, (rc, out))
    check(len(lines) == 2 and ": warning: bogus: unknown key (ignored)" in lines[0], lines)
    check(lines[1] == "configuration ok", lines)


if __name__ == "__main__":
    run_tests([test_valid, test_every_problem_reported, test_syntax_and_missing,
               test_warning_only_is_ok])
