"""The same config, the same answer: stunnerd v1.2.1 against `turngated -t` (#39).

Every config of the STUNner corpus (tests/conf/stunner/MANIFEST) is given to STUNner's own
config loading and reconciliation (tests/stunner/cmd/stunner-validate: what `stunnerd -c FILE`
does, in a dry run, built from the pinned Go module by scripts/build-stunner.sh) and to
`turngated -t`, each without and with a stunnerd pod's environment (the one
tests/conf/stunner.sh uses). Accept and refuse must agree, except where DIFFERENCES names the
row of docs/configuration.md ("Differences from stunnerd") that gives the reason; such a row
must exist, and a listed difference that no longer differs fails too (the list stays true).

The programs come from scripts/build-stunner.sh --offline (never the network at test time):
without them (no Go, modules never fetched) the test skips (77), or fails under CI=true.
"""
import os
import re
import subprocess
import sys

top_srcdir = os.environ.get("top_srcdir", os.path.join(os.path.dirname(__file__), "..", ".."))
top_builddir = os.environ.get("top_builddir", ".")
CORPUS = os.path.join(top_srcdir, "tests", "conf", "stunner")

# tests/conf/stunner.sh's pod environment (the operator's downward API plus the ConfigMap of
# l7mp/stunner deploy/manifests/stunner-local.yaml).
POD_ENV = dict(x.split("=", 1) for x in """STUNNER_ADDR=10.0.0.1 STUNNER_NAME=gateway-1
STUNNER_NAMESPACE=testnamespace STUNNER_NODENAME=node-1 STUNNER_PUBLIC_ADDR=1.2.3.4
STUNNER_PUBLIC_PORT=3478 STUNNER_PORT=3478 STUNNER_REALM=stunner.l7mp.io
STUNNER_AUTH_TYPE=plaintext STUNNER_USERNAME=12user34 STUNNER_PASSWORD=43passWord21
STUNNER_SHARED_SECRET=my-shared-secret STUNNER_LOGLEVEL=all:INFO STUNNER_MIN_PORT=10000
STUNNER_MAX_PORT=20000""".split())

# (file, environment) -> the start of the "Where" cell of the configuration.md row that
# explains why stunnerd and turngate answer differently.
DIFFERENCES = {
    ("stunnerd-image-default.conf", "pod"): "A variable in a number field",
}


def programs():
    ci = os.environ.get("CI") == "true"
    script = os.path.join(top_srcdir, "scripts", "build-stunner.sh")
    r = subprocess.run(["sh", script, "--offline"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=900)
    if r.returncode != 0:
        print("%s: STUNner's programs not built (scripts/build-stunner.sh, run by "
              "scripts/setup.sh):\n%s%s" % (os.path.basename(sys.argv[0]), r.stderr,
                                             "" if ci else "skipped"))
        sys.exit(1 if ci else 77)
    return r.stdout.strip()


def env_for(kind):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
        if k in os.environ:
            env[k] = os.environ[k]
    if kind == "pod":
        env.update(POD_ENV)
    return env


def stunnerd_verdicts(validate, files, kind):
    r = subprocess.run([validate] + files, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True, timeout=120, env=env_for(kind), cwd=CORPUS)
    if r.returncode != 0:
        raise SystemExit("stunner-validate exited %d" % r.returncode)
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r"(ok|refused) (\S+?)(?:: (.*))?$", line)
        if m:
            out[m.group(2)] = (m.group(1), m.group(3) or "")
    return out


def turngate_verdict(path, kind):
    r = subprocess.run([os.path.join(top_builddir, "turngated"), "-c", path, "-t"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=30, env=env_for(kind))
    lines = r.stdout.strip().splitlines()
    if r.returncode == 0 and lines and lines[-1] == "configuration ok":
        return "ok", ""
    errs = [x for x in lines if ": warning: " not in x]
    return "refused", (errs[0] if errs else "rc=%d" % r.returncode)


def difference_rows():
    text = open(os.path.join(top_srcdir, "docs", "configuration.md")).read()
    sec = text.split("## Differences from stunnerd", 1)[1].split("\n## ", 1)[0]
    return [x for x in sec.splitlines() if x.startswith("| ")]


def main():
    if not os.access(os.path.join(top_builddir, "turngated"), os.X_OK):
        print("skip: turngated not built")
        sys.exit(77)
    bindir = programs()
    validate = os.path.join(bindir, "stunner-validate")
    files = []
    for line in open(os.path.join(CORPUS, "MANIFEST")):
        if line.strip() and not line.startswith("#"):
            files.append(line.split()[0])
    rows = difference_rows()
    fail = 0
    seen = set()
    for kind in ("bare", "pod"):
        st = stunnerd_verdicts(validate, files, kind)
        for f in files:
            if f not in st:
                print("FAIL: %s (%s): no answer from stunner-validate" % (f, kind))
                fail = 1
                continue
            sv, sreason = st[f]
            tv, treason = turngate_verdict(os.path.join(CORPUS, f), kind)
            why = DIFFERENCES.get((f, kind))
            line = "%-34s %-4s stunnerd %-7s turngated %-7s" % (f, kind, sv, tv)
            if why is not None:
                seen.add((f, kind))
                if not any(r.startswith("| " + why) for r in rows):
                    print("FAIL: %s: no row \"%s\" in configuration.md's differences"
                          % (line, why))
                    fail = 1
                elif sv == tv:
                    print("FAIL: %s: listed as a difference (%s) but both agree" % (line, why))
                    fail = 1
                else:
                    print("ok   %s (listed difference: %s)" % (line, why))
                    print("       stunnerd: %s" % sreason)
            elif sv != tv:
                print("FAIL: %s: they disagree\n       stunnerd: %s\n       turngated: %s"
                      % (line, sreason, treason))
                fail = 1
            else:
                print("ok   %s%s" % (line, (" (stunnerd: %s)" % sreason) if sreason else ""))
    for k in set(DIFFERENCES) - seen:
        print("FAIL: DIFFERENCES lists %s, which is not in the corpus" % (k,))
        fail = 1
    sys.exit(fail)


if __name__ == "__main__":
    main()
