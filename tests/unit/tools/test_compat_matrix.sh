#!/usr/bin/env bash
# The compatibility matrix's verdict (tests/gpu/checks/compat_matrix.py) on hand-made run records:
# a same-path arm whose tokens differ from stock's is a regression only when stock gave the same
# tokens twice; when stock's repeat did not run (a deadline) the difference is "not judged", never
# a failure nor a pass; the repeat is asked for right after the differing arm, once per row.
# Also tests/gpu/checks/same_path.py's arm specs and per-sequence first divergence.
# Usage: test_compat_matrix.sh CHECKS_DIR
set -euo pipefail
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "SKIP: no python3"; exit 77; }
"$py" - "$1" <<'PY'
import importlib.util, sys
D = sys.argv[1]
sys.path.insert(0, D)
def load(name):
    spec = importlib.util.spec_from_file_location(name, D + "/" + name + ".py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m
M = load("compat_matrix")
def rec(row, arm, digest, ok=True, **kw):
    return dict(row=row, arm=arm, rc=0 if ok else 1, ok=ok, digest=digest, seconds=1.0, tail=[], **kw)

# same differs, stock's repeat matches stock: a regression
recs = [rec("r", "stock", "A"), rec("r", "same", "B"), rec("r", "aa", "A")]
lines, bad, unjudged = M.judge(recs)
assert bad == ["r/same: output differs from stock on the same attention path"], bad
assert not unjudged
# same differs, stock differs from itself: neither
recs[2] = rec("r", "aa", "C")
lines, bad, unjudged = M.judge(recs)
assert not bad and not unjudged, (bad, unjudged)
assert any("stock differs from itself too" in l for l in lines), lines
# same differs, no repeat (the deadline cut it): not judged, not a regression
lines, bad, unjudged = M.judge(recs[:2])
assert not bad and len(unjudged) == 1 and "aa did not run" in unjudged[0], (bad, unjudged)
assert any("not judged" in l for l in lines)
# the repeat was skipped by the deadline: still not judged
lines, bad, unjudged = M.judge(recs[:2] + [dict(row="r", arm="aa", rc="not run (deadline)", ok=False, skipped=True)])
assert not bad and len(unjudged) == 1, (bad, unjudged)
# stock's repeat failed, or gave no tokens: not judged, and not a failure "under the shim"
lines, bad, unjudged = M.judge(recs[:2] + [rec("r", "aa", None, ok=False)])
assert not bad and "aa failed (rc 1)" in unjudged[0], (bad, unjudged)
lines, bad, unjudged = M.judge(recs[:2] + [rec("r", "aa", None)])
assert not bad and "aa gave no tokens" in unjudged[0], (bad, unjudged)
# identical: nothing to say; the shim arm (other path) differs without verdict
lines, bad, unjudged = M.judge([rec("r", "stock", "A"), rec("r", "same", "A"), rec("r", "shim", "Z")])
assert not bad and not unjudged
assert any("identical to stock" in l for l in lines) and any("other attention path" in l for l in lines)
# a shim arm that fails where stock ran is a regression; flash pair judged against stock_flash
lines, bad, _ = M.judge([rec("r", "stock", "A"), rec("r", "shim", None, ok=False)])
assert bad == ["r/shim: runs stock, fails under the shim (rc 1)"], bad
lines, bad, _ = M.judge([rec("r", "stock_flash", "F"), rec("r", "same_flash", "G"), rec("r", "aa_flash", "F")])
assert bad == ["r/same_flash: output differs from stock_flash on the same attention path"], bad

# needs_repeat: right after a differing same-path arm, once per row, never for other arms
s, d = rec("r", "stock", "A"), rec("r", "same", "B")
assert M.needs_repeat(d, [s, d]) == "aa"
assert M.needs_repeat(d, [s, d, rec("r", "aa", "A")]) is None
assert M.needs_repeat(d, [s, d, dict(row="r", arm="aa", rc="x", ok=False, skipped=True)]) == "aa"
assert M.needs_repeat(rec("r", "same", "A"), [s]) is None          # identical
assert M.needs_repeat(rec("r", "shim", "B"), [s]) is None          # another path
assert M.needs_repeat(rec("q", "same", "B"), [s]) is None          # no stock in its row
assert M.needs_repeat(rec("r", "same", None), [s]) is None         # nothing to compare
f = rec("r", "same_flash", "G")
assert M.needs_repeat(f, [rec("r", "stock_flash", "F"), f]) == "aa_flash"

# The row loop (main) with run_one stubbed: a reference that runs after its same-path arm still
# gets its repeat; a repeat listed in the row after it ran as one does not run twice.
calls = []
def fake_run_one(row, arm, args, rep=0):
    calls.append((row, arm))
    d = {"same": "B", "same_flash": "G"}.get(arm, "A")
    return rec(row, arm, d)
import os, tempfile
M.run_one, M.gpu_count = fake_run_one, lambda: 1
out = tempfile.mkdtemp()
sys.argv = ["compat_matrix.py", "--shim", "x.so", "--out", out,
            "--rows", "hf_eager:same_flash+stock_flash,hf_padded:stock+same+aa"]
rc = M.main()
assert calls == [("hf_eager", "same_flash"), ("hf_eager", "stock_flash"), ("hf_eager", "aa_flash"),
                 ("hf_padded", "stock"), ("hf_padded", "same"), ("hf_padded", "aa")], calls
assert rc == 1  # both differences judged: stock and stock_flash gave the same tokens twice
txt = open(os.path.join(out, "compat-matrix.txt")).read()
assert "hf_eager/same_flash: output differs from stock_flash" in txt and "hf_padded/same: output differs" in txt, txt

# Default arms: HF generate rows judge the flash pair (cuDNN is not deterministic between stock
# processes); other rows stock, shim, same.
calls.clear()
sys.argv = ["compat_matrix.py", "--shim", "x.so", "--out", tempfile.mkdtemp(), "--rows", "hf_eager,cont_batch"]
M.main()
assert calls == [("hf_eager", "stock"), ("hf_eager", "shim"), ("hf_eager", "stock_flash"), ("hf_eager", "same_flash"),
                 ("hf_eager", "aa_flash"), ("cont_batch", "stock"), ("cont_batch", "shim"), ("cont_batch", "same"),
                 ("cont_batch", "aa")], calls

S = load("same_path")
assert S.parse_arm("stock") == ("stock", None, None, {})
assert S.parse_arm("h:shim=a/b.so:ref=sf:PONYTAIL_ATTN=off:X=1=2") == (
    "h", "a/b.so", "sf", {"PONYTAIL_ATTN": "off", "X": "1=2"})
for bad_spec in (":shim=x", "h:novalue", "h:=v"):
    try:
        S.parse_arm(bad_spec)
        raise AssertionError("accepted " + bad_spec)
    except ValueError:
        pass
assert S.first_divergence([[1, 2, 3], [4, 5], [7, 8]], [[1, 2, 3], [4, 6], [7]]) == [None, 1, 1]
print("compat_matrix verdicts OK")
PY
