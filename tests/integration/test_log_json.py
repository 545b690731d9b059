"""log_format: json: every line turngated writes is JSON, the config diagnostics included
(at -t, at start, at an applied and at a rejected reload), with file, line, column and
message as fields of their own."""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_admin import (TURNGATED, Daemon, check, config_yaml, free_port,  # noqa: E402
                           run_tests, wait_for)


def json_lines(text, what):
    """Every line of text parsed as a JSON object (a Failure names the first that is not)."""
    out = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        check(isinstance(obj, dict), "%s: not a JSON line: %r\n%s" % (what, line, text))
        out.append(obj)
    return out


def diags(objs):
    return [o for o in objs if o.get("scope") == "config" and "file" in o]


def warned_config(d, port):
    """A json-logging config with a warning: a route to a cluster that does not exist, named
    with a quote and a backslash (the JSON line must escape them)."""
    text = config_yaml(os.path.join(d, "admin.sock"), [("udp", port, "TURN-UDP")],
                       extra_admin="  log_format: json\n")
    return text.replace("routes: [loopback]", 'routes: [loopback, "no\\"wh\\\\ere"]')


def test_log_json_diagnostics(d):
    port = free_port()
    text = warned_config(d, port)
    daemon = Daemon(d, text)
    # -t: the check prints its findings in the format the file asks for.
    r = subprocess.run([TURNGATED, "-c", daemon.conf, "-t"], capture_output=True, text=True,
                       timeout=30)
    objs = json_lines(r.stdout + r.stderr, "-t")
    check(r.returncode == 0 and objs[-1]["msg"] == "configuration ok", r)
    ds = diags(objs)
    check(len(ds) == 1 and ds[0]["level"] == "WARN" and ds[0]["file"] == daemon.conf and
          ds[0]["line"] > 0 and ds[0]["column"] > 0 and "unknown cluster 'no\"wh\\ere'" in
          ds[0]["message"] and ds[0]["path"].startswith("listeners[0].routes"), ds)
    daemon.start()
    try:
        # An applied reload with the warning (SIGHUP), then a rejected one (an error).
        gen = daemon.admin({"cmd": "status"})["generation"]
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: daemon.admin({"cmd": "status"})["generation"] == gen + 1,
                 "SIGHUP reload")
        daemon.write_config(text.replace("port: %d" % port, "port: 70000", 1))
        rc, out, err = daemon.ctl("reload")
        check(rc == 1, (rc, out, err))
        # A reload the guard refuses (a misspelled listeners key would empty the gateway):
        # its diagnostics ("did you mean") are JSON too.
        daemon.write_config(text.replace("listeners:", "listners:", 1))
        rc, out, err = daemon.ctl("reload")
        check(rc != 0, (rc, out, err))
    finally:
        check(daemon.stop() == 0, "exit status")
    objs = json_lines(daemon.stderr(), "daemon stderr")
    ds = diags(objs)
    warns = [o for o in ds if o["level"] == "WARN" and "unknown cluster" in o["message"]]
    errors = [o for o in ds if o["level"] == "ERROR"]
    # start, SIGHUP, the rejected and the refused reload: each says it again
    check(len(warns) >= 2 and all('no"wh\\ere' in o["message"] for o in warns), ds)
    check(len(errors) == 1 and "70000 is out of range" in errors[0]["message"] and
          errors[0]["line"] > 0 and errors[0]["column"] > 0 and
          errors[0]["file"] == daemon.conf, ds)
    check(any("rejected" in o["msg"] for o in objs), objs)
    check(any(o["path"] == "listners" and "did you mean" in o["message"] and o["line"] > 0
              for o in ds), ds)
    # A start that fails on the config: its diagnostics and its last words are JSON too.
    bad = os.path.join(d, "bad.yaml")
    with open(bad, "w") as f:
        f.write(text.replace("port: %d" % port, "port: 70000", 1))
    r = subprocess.run([TURNGATED, "-c", bad], capture_output=True, text=True, timeout=30)
    objs = json_lines(r.stdout + r.stderr, "failed start")
    check(r.returncode != 0 and any(o.get("message", "").startswith("70000") for o in objs),
          r)


if __name__ == "__main__":
    run_tests([test_log_json_diagnostics])
