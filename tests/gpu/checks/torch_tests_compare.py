#!/usr/bin/env python3
"""Compares two pytest runs of PyTorch's test_cuda.py (tests/gpu/checks/torch_tests.sh): stock and under
the shim. Each run is read from its junit XML (pytest --junitxml), or, when the XML is missing (an
arm killed before pytest wrote it), from the -rA summary in its log.

Every test is classified passed / xfailed (an expected failure that failed) / failed / crashed
(pytest-xdist: "worker 'gw0' crashed while running ...", e.g. an abort, or a per-test timeout of
pytest-timeout's thread method) / error / skipped / missing (not in that run).

Prints the regressions (passed or xfailed stock, anything else under the shim) with the first
lines of their failure, the tests failing stock that pass under the shim, and a compact table
last; writes the whole comparison (every differing and failing test with its message) to
--report. Exit 0: no regression; 1: regressions; 2: no stock results at all; 3: stock passed no
test (e.g. the test file does not collect under this torch: a test_cuda.py of another release),
so nothing was compared.

Usage: torch_tests_compare.py --stock S.xml --shim T.xml [--name native] [--stock-log S.log]
       [--shim-log T.log] [--stock-rc N] [--shim-rc N] [--report F.txt] [--table F.table]
(--report gets the whole comparison with the table last, --table the table alone.)
"""
import argparse
import os
import re
import sys
import xml.etree.ElementTree as ET

GOOD = ("passed", "xfailed")
STATUSES = ("passed", "xfailed", "failed", "crashed", "error", "skipped", "missing")
# When one test has several entries (e.g. a failing call and an erroring teardown), the worst wins.
RANK = {"skipped": 0, "xfailed": 1, "passed": 2, "failed": 3, "error": 4, "crashed": 5}
CRASH_RE = re.compile(r"worker '?\w+'? crashed|node down|Not properly terminated", re.I)
SUMMARY_RE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+::\S+)(?:\s+-\s+(.*))?$")


def test_id(classname, name):
    """'test_cuda.TestCuda' + 'test_x' -> 'TestCuda::test_x' (module path dropped)."""
    cls = (classname or "").split(".")[-1]
    return f"{cls}::{name}" if cls else name


def nodeid_to_id(nodeid):
    """'test_cuda.py::TestCuda::test_x' -> 'TestCuda::test_x'."""
    parts = nodeid.split("::")
    return "::".join(parts[1:]) if len(parts) > 1 and parts[0].endswith(".py") else nodeid


def snippet(message, text, nlines=4, width=200):
    """The first informative lines of a failure: its message, then pytest's 'E   ' lines."""
    lines = []
    for ln in (message or "").splitlines():
        if ln.strip():
            lines.append(ln.strip())
        if len(lines) >= 2:
            break
    for ln in (text or "").splitlines():
        if ln.startswith("E ") and ln[1:].strip() and ln[1:].strip() not in lines:
            lines.append(ln[1:].strip())
        if len(lines) >= nlines:
            break
    if not lines and text:
        lines = [ln.strip() for ln in text.strip().splitlines()[-nlines:] if ln.strip()]
    return [ln[:width] + ("..." if len(ln) > width else "") for ln in lines[:nlines]]


def merge(results, tid, status, msg, secs):
    old = results.get(tid)
    if old is None:
        results[tid] = [status, msg, secs]
    else:
        if RANK[status] > RANK[old[0]]:
            old[0], old[1] = status, msg
        old[2] += secs


def parse_xml(path):
    """-> ({id: [status, [message lines], seconds]}, wall seconds or None)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    wall = sum(float(s.get("time", 0) or 0) for s in suites) if suites else None
    results = {}
    for tc in root.iter("testcase"):
        tid = test_id(tc.get("classname"), tc.get("name", "?"))
        secs = float(tc.get("time", 0) or 0)
        status, msg = "passed", []
        for child in tc:
            message, text = child.get("message", ""), child.text or ""
            if child.tag in ("failure", "error"):
                if CRASH_RE.search(message) or CRASH_RE.search(text[:2000]):
                    st = "crashed"
                else:
                    st = "failed" if child.tag == "failure" else "error"
                lines = snippet(message, text)
            elif child.tag == "skipped":
                kind = (child.get("type", "") + " " + message).lower()
                st = "xfailed" if "xfail" in kind else "skipped"
                lines = snippet(message, text, nlines=1)
            else:
                continue
            if status == "passed" or RANK[st] > RANK[status]:
                status, msg = st, lines
        merge(results, tid, status, msg, secs)
    return results, wall


def parse_log(path):
    """Fallback: the -rA short summary of a pytest log (skips carry no test id there)."""
    results = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = SUMMARY_RE.match(line.rstrip("\n"))
            if not m:
                continue
            word, nodeid, message = m.groups()
            status = {"PASSED": "passed", "XPASS": "passed", "XFAIL": "xfailed",
                      "SKIPPED": "skipped", "ERROR": "error"}.get(word, "failed")
            if status in ("failed", "error") and message and CRASH_RE.search(message):
                status = "crashed"
            merge(results, nodeid_to_id(nodeid), status, [message] if message else [], 0.0)
    return results


def load(xml_path, log_path):
    """-> (results or None, wall seconds or None, source description)."""
    if xml_path and os.path.isfile(xml_path) and os.path.getsize(xml_path) > 0:
        try:
            res, wall = parse_xml(xml_path)
            return res, wall, os.path.basename(xml_path)
        except ET.ParseError as e:
            note = f"unreadable XML ({e})"
    else:
        note = "no XML"
    if log_path and os.path.isfile(log_path):
        res = parse_log(log_path)
        if res:
            return res, None, f"{note}; -rA summary of {os.path.basename(log_path)}"
    return None, None, note


def counts(results):
    c = dict.fromkeys(STATUSES, 0)
    for st, _, _ in results.values():
        c[st] += 1
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stock", required=True, help="junit XML of the stock run")
    ap.add_argument("--shim", required=True, help="junit XML of the run under the shim")
    ap.add_argument("--name", default="native", help="backend name for the report")
    ap.add_argument("--stock-log")
    ap.add_argument("--shim-log")
    ap.add_argument("--stock-rc", default="")
    ap.add_argument("--shim-rc", default="")
    ap.add_argument("--report", help="write the whole comparison here")
    ap.add_argument("--table", help="write the compact table here")
    ap.add_argument("--max-print", type=int, default=40, help="regressions printed in full")
    a = ap.parse_args()

    stock, stock_wall, stock_src = load(a.stock, a.stock_log)
    shim, shim_wall, shim_src = load(a.shim, a.shim_log)
    rep = []  # the full report

    def out(line=""):
        rep.append(line)

    out(f"== torch tests [{a.name}]: stock from {stock_src}; shim from {shim_src}")
    if stock is None:
        text = "\n".join(rep + [f"torch tests [{a.name}]: no stock results: nothing to compare"])
        print(text)
        for path in (a.report, a.table):
            if path:
                with open(path, "w") as f:
                    f.write(text + "\n")
        return 2
    shim = shim or {}
    ids = sorted(set(stock) | set(shim))
    get = lambda res, t: res.get(t, ["missing", [], 0.0])  # noqa: E731
    regressions, fixed, both_bad, other = [], [], [], []
    for t in ids:
        s, h = get(stock, t), get(shim, t)
        if s[0] in GOOD and h[0] not in GOOD:
            regressions.append((t, s, h))
        elif s[0] in ("failed", "crashed", "error") and h[0] in GOOD:
            fixed.append((t, s, h))
        elif s[0] in ("failed", "crashed", "error") and h[0] in ("failed", "crashed", "error"):
            both_bad.append((t, s, h))
        elif s[0] != h[0]:
            other.append((t, s, h))

    cs, ch = counts({t: get(stock, t) for t in ids}), counts({t: get(shim, t) for t in ids})
    for label, c in (("stock", cs), ("shim", ch)):
        out(f"{label:5s}: " + ", ".join(f"{k} {c[k]}" for k in STATUSES if c[k]))
    out()

    def section(title, rows, side, nlines):
        out(f"== {title}: {len(rows)}")
        for t, s, h in rows:
            out(f"  {t}: stock {s[0]}, shim {h[0]}")
            for label, r in (("shim", h), ("stock", s)) if side == "both" else ((side, h if side == "shim" else s),):
                for i, ln in enumerate(r[1][:nlines]):
                    out(f"      {label + ': ' if side == 'both' and i == 0 else ''}{ln}")
        out()

    section("REGRESSIONS (pass stock, not under the shim)", regressions, "shim", 4)
    section("fixed (fail stock, pass under the shim)", fixed, "stock", 2)
    section("failing in both runs", both_bad, "both", 2)
    section("other differences (skips, missing)", other, "shim", 1)

    # stdout: regressions with their first lines, fixed tests, then the table last.
    print(rep[0])
    if regressions:
        print(f"REGRESSIONS (pass stock, not under the shim): {len(regressions)}")
        for t, s, h in regressions[: a.max_print]:
            print(f"  {t}: shim {h[0]}")
            for ln in h[1][:3]:
                print(f"      {ln}")
        if len(regressions) > a.max_print:
            print(f"  ... {len(regressions) - a.max_print} more in {a.report or 'the report'}")
    if fixed:
        print(f"fail stock, pass under the shim: {len(fixed)}")
        for t, s, _ in fixed[:20]:
            print(f"  {t}: stock {s[0]}" + (f": {s[1][0][:120]}" if s[1] else ""))
    if both_bad:
        print(f"failing in both runs: {len(both_bad)} (see {a.report or 'the report'})")

    def fmt_wall(w):
        return f"{w:7.1f}" if w is not None else "      -"

    tbl = [f"torch tests [{a.name}]  rc   pass xfail  fail crash error  skip  miss  total   time_s"]
    for label, c, rc, wall in (("stock", cs, a.stock_rc, stock_wall), ("shim", ch, a.shim_rc, shim_wall)):
        rc = str(rc).strip() or "-"
        tbl.append(f"  {label:19s} {rc:>3s} {c['passed']:6d} {c['xfailed']:5d} {c['failed']:5d} "
                   f"{c['crashed']:5d} {c['error']:5d} {c['skipped']:5d} {c['missing']:5d} "
                   f"{len(ids):6d} {fmt_wall(wall)}")
    # A run where stock passed nothing compared nothing: say so instead of "OK" (a test_cuda.py
    # from another torch release once failed to collect in both arms and read as a pass).
    empty = cs["passed"] + cs["xfailed"] == 0
    verdict = "FAIL" if regressions else ("NOTHING COMPARED: stock passed no test" if empty else "OK")
    tbl.append(f"  [{a.name}] regressions {len(regressions)}, fixed {len(fixed)}, "
               f"failing in both {len(both_bad)}, other differences {len(other)}: {verdict}")
    print("\n".join(tbl))
    if a.report:
        with open(a.report, "w") as f:
            f.write("\n".join(rep + tbl) + "\n")
    if a.table:
        with open(a.table, "w") as f:
            f.write("\n".join(tbl) + "\n")
    return 1 if regressions else (3 if empty else 0)


if __name__ == "__main__":
    sys.exit(main())
