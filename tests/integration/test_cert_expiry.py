"""Certificate expiry (#37): a TLS/DTLS listener's certificate that has expired, or expires
within 14 days (CONF_TLS_EXPIRY_WARN_DAYS), is a warning at `turngated -t`, at start, at a
reload and in `turngatectl doctor`, and
turngate_tls_certificate_expiry_seconds{listener} on /metrics counts the seconds to its
notAfter (negative once expired). Certificates from Python's cryptography package: one
that expired on 2020-06-01, one that expires in 5 days, one good for 90 days.
"""
import datetime
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import TURNGATED, Daemon, check, free_port, run_tests, wait_for  # noqa: E402
from test_tcp_relay import with_metrics  # noqa: E402
from test_tls import tls_config  # noqa: E402

METRIC = "turngate_tls_certificate_expiry_seconds"


def make_cert(d, name, not_before, not_after):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    subj = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "turn.test")])
    cert = (x509.CertificateBuilder().subject_name(subj).issuer_name(subj)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("turn.test")]), False)
            .sign(key, hashes.SHA256()))
    crt, kp = os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")
    with open(crt, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(kp, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return crt, kp


def certs(d):
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    old = make_cert(d, "expired", datetime.datetime(2019, 6, 1, tzinfo=datetime.timezone.utc),
                    datetime.datetime(2020, 6, 1, tzinfo=datetime.timezone.utc))
    soon = make_cert(d, "soon", now - datetime.timedelta(days=1),
                     now + datetime.timedelta(days=5, hours=1))
    good = make_cert(d, "good", now - datetime.timedelta(days=1),
                     now + datetime.timedelta(days=90))
    return old, soon, good


def config_with(d, tls_cert, dtls_cert, mport, ports):
    """TURN-TLS listener "tls" with tls_cert, TURN-DTLS "dtls" with dtls_cert."""
    text = tls_config(d, ports[0], ports[1], ports[2], tls_cert[0], tls_cert[1])
    old = "    cert_file: %s\n    key_file: %s\n" % tls_cert
    head, _, tail = text.rpartition(old)
    text = head + "    cert_file: %s\n    key_file: %s\n" % dtls_cert + tail
    return with_metrics(text, mport)


EXPIRED = "certificate expired "
SOON = "certificate expires in 5 days"


def check_warnings(out, what):
    lines = [ln for ln in out.splitlines() if "warning:" in ln and "certificate" in ln]
    check(any("listeners[1].cert_file: " + EXPIRED in ln and "2020-06-01" in ln
              for ln in lines), "%s: no warning for the expired certificate: %r" % (what, out))
    check(any("listeners[2].cert_file: " + SOON in ln for ln in lines),
          "%s: no warning for the certificate expiring in 5 days: %r" % (what, out))
    return lines


def expiry(mport):
    from harness_admin import scrape
    got = scrape(mport)
    return {k: v for k, v in got.items() if k.startswith(METRIC)}


def test_expiry(d):
    """-t, start, metric, reload to a good certificate, doctor."""
    old, soon, good = certs(d)
    mport, ports = free_port(), (free_port(), free_port(), free_port())
    daemon = Daemon(d, config_with(d, old, soon, mport, ports))
    r = subprocess.run([TURNGATED, "-t", "-c", daemon.conf], capture_output=True, text=True,
                       timeout=30)
    out = r.stdout + r.stderr
    check(r.returncode == 0 and "configuration ok" in out, "-t: rc %d %r" % (r.returncode, out))
    check_warnings(out, "-t")
    daemon.start()
    try:
        check_warnings(daemon.stderr(), "start")
        m = expiry(mport)
        tls, dtls = m.get(METRIC + '{listener="tls"}'), m.get(METRIC + '{listener="dtls"}')
        now = time.time()
        want_tls = datetime.datetime(2020, 6, 1, tzinfo=datetime.timezone.utc).timestamp() - now
        check(tls is not None and abs(tls - want_tls) < 120, "tls expiry %r (want %.0f): %r"
              % (tls, want_tls, m))
        check(dtls is not None and abs(dtls - (5 * 86400 + 3600)) < 120, "dtls expiry %r" % dtls)
        check(len(m) == 2, "only the TLS and DTLS listeners: %r" % (m,))
        rc, out, err = daemon.ctl("doctor")
        check("certificate tls" in out and "WARN expired" in out and
              "certificate dtls" in out and "WARN expires in 5 days" in out,
              "doctor: %r %r" % (out, err))
        # Reload with a good certificate on tls: its warning is gone, dtls's is repeated.
        before = daemon.stderr()
        daemon.write_config(config_with(d, good, soon, mport, ports))
        rc, out, err = daemon.ctl("reload")
        check(rc == 0, "reload: %r %r" % (out, err))
        wait_for(lambda: SOON in daemon.stderr()[len(before):], "the reload's warning",
                 timeout=10)
        new = daemon.stderr()[len(before):]
        check(EXPIRED not in new, "a warning for the replaced certificate: %r" % new)
        m = expiry(mport)
        check(m.get(METRIC + '{listener="tls"}', 0) > 89 * 86400, "tls after reload: %r" % m)
    finally:
        daemon.stop()


if __name__ == "__main__":
    run_tests([test_expiry])
