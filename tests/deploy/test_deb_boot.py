#!/usr/bin/python3
"""tests/deploy/test_deb_boot.py: the Debian package built from debian/ and installed with apt in a booted Debian 12.

Builds the package as a packager would, from the release tarball (`make dist-gzip` of this
build, unpacked, `dpkg-buildpackage -us -uc -b`), boots a fresh copy of the cached tree
(tests/deploy/deploy_cache.sh boot, private network) and checks that
`apt install ./turngate_VERSION_ARCH.deb` works there and that the package
- installs the unit, creates the system user and group turngate (postinst: sysusers),
  ships /etc/turngate/turngate.yaml as a conffile, and enables and starts nothing;
- serves once configured the way the example config says (secret files, STUNNER_ADDR in
  /etc/default/turngate): `systemctl start turngate`, `turngatectl probe` relays;
- on `apt remove` keeps a modified conffile, and `apt purge` removes it.
Needs root, dpkg-buildpackage and debhelper, systemd-nspawn, debootstrap and nsenter; a
missing one fails when CI=true and skips (exit 77) with the reason otherwise.
"""
import glob
import os
import subprocess
import sys
import tempfile
import time

import yaml

from deploy_turn import SECRET, cached, check, require, step, write_yaml
from test_systemd_boot import Machine, probe

BUILD = os.environ.get("top_builddir", ".")
CONF = "/etc/turngate/turngate.yaml"


def build_deb(tmp):
    """The .deb built from this build's tarball; returns its path."""
    t = time.monotonic()
    subprocess.run(["make", "-s", "-C", BUILD, "dist-gzip"], check=True, stdout=subprocess.DEVNULL)
    tarball = max(glob.glob(os.path.join(BUILD, "turngate-*.tar.gz")), key=os.path.getmtime)
    subprocess.run(["tar", "-C", tmp, "-xzf", tarball], check=True)
    src = os.path.join(tmp, os.path.basename(tarball)[:-len(".tar.gz")])
    r = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200)
    if r.returncode != 0:
        print(r.stdout[-4000:])
        raise AssertionError("dpkg-buildpackage failed")
    debs = [d for d in glob.glob(os.path.join(tmp, "turngate_*.deb"))]
    check(len(debs) == 1, f"expected one turngate_*.deb, got {debs}")
    print(f"built {os.path.basename(debs[0])} in {time.monotonic() - t:.0f} s")
    return debs[0]


def scenario(m, tree, deb):
    step("apt install ./" + os.path.basename(deb))
    r = m.sh(f"DEBIAN_FRONTEND=noninteractive apt-get install -y /root/{os.path.basename(deb)}",
             check_rc=False, timeout=300)
    check(r.returncode == 0, f"apt install: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    m.sh("id turngate && getent group turngate")
    check(m.sh("dpkg-query -W -f='${Conffiles}' turngate").stdout.split()[0] == CONF,
          f"{CONF} is not the conffile")
    enabled = m.sh("systemctl is-enabled turngate", check_rc=False).stdout.strip()
    active = m.sh("systemctl is-active turngate", check_rc=False).stdout.strip()
    check(enabled == "disabled" and active == "inactive",
          f"after install: is-enabled {enabled}, is-active {active}")

    step("configure as the example config says, start, relay")
    m.sh("install -m 0640 -g turngate /dev/null /etc/turngate/secret"
         f" && echo {SECRET} > /etc/turngate/secret"
         " && install -m 0640 -g turngate /etc/turngate/secret /etc/turngate/previous-secret"
         " && echo STUNNER_ADDR=127.0.0.1 > /etc/default/turngate")
    with open(tree + CONF, encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    cfg["clusters"][0]["endpoints"].append("127.0.0.0/8")
    write_yaml(tree + CONF, cfg)
    m.sh("systemctl start turngate")
    probe(m, "/usr/bin", 3478)
    m.sh("systemctl stop turngate", timeout=90)

    step("apt remove keeps the modified conffile, apt purge removes it")
    m.sh("DEBIAN_FRONTEND=noninteractive apt-get remove -y turngate", timeout=120)
    check(os.path.exists(tree + CONF), "apt remove deleted the modified conffile")
    m.sh("DEBIAN_FRONTEND=noninteractive apt-get purge -y turngate", timeout=120)
    check(not os.path.exists(tree + CONF), "apt purge left the conffile")


def main():
    require("systemd-nspawn, dpkg-buildpackage",
            ("dpkg-buildpackage", "dh", "systemd-nspawn", "debootstrap", "nsenter", "ps"))
    t0 = time.monotonic()
    boot = cached("boot")
    cache = os.environ.get("TG_DEPLOY_CACHE", "/var/cache/turngate-test")
    with tempfile.TemporaryDirectory(dir=cache, prefix="run-deb.") as tmp:
        log = open(os.path.join(tmp, "console.log"), "w+", encoding="utf-8")
        m = None
        try:
            deb = build_deb(tmp)
            tree = os.path.join(tmp, "root")
            subprocess.run(["cp", "-a", boot, tree], check=True)
            with open(os.path.join(tree, "etc", "machine-id"), "w", encoding="utf-8") as fh:
                fh.write(os.urandom(16).hex() + "\n")
            subprocess.run(["cp", deb, os.path.join(tree, "root")], check=True)
            m = Machine(tree, log)
            m.boot()
            scenario(m, tree, deb)
        except (AssertionError, subprocess.SubprocessError, OSError, ValueError) as e:
            if m is not None and m.leader is not None:
                print(m.sh("journalctl -u turngate --no-pager | tail -n 40", check_rc=False).stdout)
            print(f"FAIL: {e}")
            return 1
        finally:
            if m is not None:
                m.poweroff()
            log.close()
    print(f"ok: package built, installed with apt, configured, served, removed, "
          f"in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
