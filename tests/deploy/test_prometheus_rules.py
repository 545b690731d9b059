#!/usr/bin/python3
"""tests/deploy/test_prometheus_rules.py: promtool checks deploy/prometheus/turngate-rules.yaml
and runs its unit tests (turngate-rules.test.yaml), where every alert fires on synthetic series
and clears again.

Also checked here, because promtool does not: every alert has a severity, a summary and a
runbook naming a turngatectl command; docs/operations.md's alert table lists it with its
for: and severity; the unit tests expect it firing at some time and not firing at a later
one; and promtool's verdict can fail: the same unit tests run against a copy of the rules
whose alerts never fire must be rejected.

Without promtool (Debian's `prometheus` package, scripts/setup.sh) the test is skipped with
a message, except in CI (CI=true), where it fails.
"""
import copy
import os
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness_admin import need_tool  # noqa: E402

SRC = os.environ.get("top_srcdir") or os.path.join(os.path.dirname(__file__), "..", "..")
PDIR = os.path.join(SRC, "deploy", "prometheus")
RULES = os.path.join(PDIR, "turngate-rules.yaml")
UNIT = os.path.join(PDIR, "turngate-rules.test.yaml")


def alerts(rules):
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def lint(rules, unit):
    """Our conventions, and that the unit tests fire and clear every alert."""
    errors = []
    for r in alerts(rules):
        name, ann = r["alert"], r.get("annotations", {})
        if r.get("labels", {}).get("severity") not in ("warning", "critical"):
            errors.append(name + ": no severity warning|critical")
        if "{{ $labels.instance }}" not in ann.get("summary", ""):
            errors.append(name + ": summary does not name the instance")
        if "`turngatectl " not in ann.get("runbook", ""):
            errors.append(name + ": runbook names no turngatectl command")
        cases = [c for t in unit["tests"] for c in t.get("alert_rule_test", [])
                 if c["alertname"] == name]
        fired = [c["eval_time"] for c in cases if c["exp_alerts"]]
        cleared = [c["eval_time"] for c in cases if not c["exp_alerts"]]
        if not fired:
            errors.append(name + ": never expected firing in the unit tests")
        elif not any(minutes(c) > min(map(minutes, fired)) for c in cleared):
            errors.append(name + ": never expected to clear after firing")
    return errors


def doc_problems(rules):
    """docs/operations.md's alert table names every alert, with the rule's for: and
    severity (numbers the docs repeat go stale unless a test reads them)."""
    with open(os.path.join(SRC, "docs", "operations.md")) as f:
        rows = [ln.split("|") for ln in f if ln.startswith("| `Turngate")]
    doc = {r[1].strip().strip("`"): (r[3].strip(), r[4].strip()) for r in rows}
    errors = []
    for r in alerts(rules):
        want = (r.get("for", "–"), r["labels"]["severity"])
        if doc.get(r["alert"]) != want:
            errors.append("docs/operations.md: %s is %r, the rule says %r"
                          % (r["alert"], doc.get(r["alert"]), want))
    extra = set(doc) - {r["alert"] for r in alerts(rules)}
    if extra:
        errors.append("docs/operations.md lists alerts that do not exist: %s" % sorted(extra))
    return errors


def minutes(t):
    check = t.endswith("m") and t[:-1].isdigit()
    if not check:
        raise ValueError("eval_time %r: expected minutes" % t)
    return int(t[:-1])


def with_runbooks(rules, unit):
    """The unit tests with every expected alert's runbook copied from its rule (it has no
    template; the summaries, which do, are written out in the unit test file)."""
    runbook = {r["alert"]: r["annotations"]["runbook"] for r in alerts(rules)}
    unit = copy.deepcopy(unit)
    for t in unit["tests"]:
        for c in t.get("alert_rule_test", []):
            for a in c["exp_alerts"]:
                a.setdefault("exp_annotations", {})["runbook"] = runbook[c["alertname"]]
    return unit


def promtool_test(promtool, d, rules, unit):
    with open(os.path.join(d, "turngate-rules.yaml"), "w") as f:
        yaml.safe_dump(rules, f, sort_keys=False)
    path = os.path.join(d, "unit.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(unit, f, sort_keys=False)
    r = subprocess.run([promtool, "test", "rules", path], capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout + r.stderr


def main():
    promtool = need_tool("promtool", "prometheus")
    failed = 0
    r = subprocess.run([promtool, "check", "rules", RULES], capture_output=True, text=True,
                       timeout=60)
    print(r.stdout.strip())
    if r.returncode != 0:
        print("FAIL promtool check rules:\n" + r.stderr)
        failed += 1
    with open(RULES) as f:
        rules = yaml.safe_load(f)
    with open(UNIT) as f:
        unit = yaml.safe_load(f)
    errors = lint(rules, unit) + doc_problems(rules)
    for e in errors:
        print("FAIL " + e)
    failed += bool(errors)
    with tempfile.TemporaryDirectory(prefix="tg-promtool-") as d:
        rc, out = promtool_test(promtool, d, rules, with_runbooks(rules, unit))
        print(out.strip())
        if rc != 0:
            print("FAIL promtool test rules")
            failed += 1
        # The verdict can fail: alerts that never fire must be caught by every firing case.
        dead = copy.deepcopy(rules)
        for a in alerts(dead):
            a["expr"] = "vector(1) == 2"
        rc, out = promtool_test(promtool, d, dead, with_runbooks(rules, unit))
        missed = [a["alert"] for a in alerts(rules) if a["alert"] not in out]
        if rc == 0 or missed:
            print("FAIL promtool test rules accepted alerts that never fire (missed: %s)"
                  % missed)
            failed += 1
    print("%s: %s" % (os.path.basename(__file__), "FAIL" if failed else "ok"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
