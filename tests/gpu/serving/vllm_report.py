#!/usr/bin/env python3
"""The serving check's table: every arm of tests/gpu/serving/vllm_check.sh, stock against the
shim, from the arms' JSON (<stage>.<n>.<arm>.json), vLLM's logs and the shim's exit stats.

  vllm_report.py RUNS_DIR     (exit 1 when a check fails: an arm that ran stock failed under the
                               shim, token sequences differ from stock other than at near ties
                               (workload.compare_tokens: where an arm recorded logprobs), sleep/wake
                               changed tokens so, the shim counted internal errors)
"""
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workload import TIE, compare_text, compare_tokens, parse_log  # noqa: E402

FAMILIES = [  # (family, pattern over the kernel's name), first match wins
    ("FA3", r"flash::|FlashAttn|flash_fwd|flash_attn"),
    ("triton", r"^triton_|^_?[a-z_0-9]+_kernel$|^matmul_kernel_persistent$|triton"),
    ("cuBLAS", r"nvjet|cublas|gemm|gemv|sm90_xmma|cutlass"),
    ("vLLM ops", r"vllm::|_ZN4vllm|rms_norm|rotary|reshape_and_cache|act_and_mul|silu_and_mul"),
    ("torch", r"at::native|at::cuda|_ZN2at6native|_ZN2at4cuda|_RangeFactories_|pytorch|c10::"),
]


def family(name):
    for fam, pat in FAMILIES:
        if re.search(pat, name):
            return fam
    return "other"


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return None


# The arms under the shim: `shim` is the default shim; `tier` adds PONYTAIL_HOST_TIER with
# PONYTAIL_HOST_TIER_INFO (the engine sizes its KV cache past the device: the capacity arm).
SHIM_ARMS = ("shim", "tier")
# Every arm with the library preloaded (`off`: loaded with PONYTAIL_ENABLE=0): each must run
# where stock runs, with stock's tokens.
LOADED_ARMS = SHIM_ARMS + ("off",)
# An arm whose warm-up after graph capture took longer than this started cold (workload.parse_log).
COLD_WARMUP_S = 5


def arms(runs):
    """{stage: [(n, arm, result, name)]} in run order."""
    out = {}
    for p in sorted(glob.glob(os.path.join(runs, "*.json"))):
        m = re.match(r"(.+)\.(\d+)\.(stock|shim|tier|off)\.json$", os.path.basename(p))
        if not m:
            continue
        stage, n, arm = m.group(1), int(m.group(2)), m.group(3)
        r = load(p) or {"ok": False, "error": "unreadable result"}
        name = "%s.%d.%s" % (stage, n, arm)
        for logname in (name + ".log", name + ".server.log"):
            lp = os.path.join(runs, logname)
            if os.path.exists(lp):
                with open(lp, errors="replace") as f:
                    text = f.read()
                for k, v in parse_log(text).items():
                    r.setdefault(k, v)
                r["cold_compile"] = r.get("cold_compile") or "Compiling a graph for" in text or \
                    (r.get("warmup_after_capture_s") or 0) > COLD_WARMUP_S
        if os.path.exists(os.path.join(runs, name + ".cold")):  # SGLang: its JIT cache was empty
            r["cold_compile"] = True
        out.setdefault(stage, []).append((n, arm, r, name))
    for v in out.values():
        v.sort(key=lambda x: x[0])
    return out


def shim_stats(runs, name):
    """The shim's exit stats of one arm's processes, summed: launches by family, swaps,
    fallbacks and reasons, pool figures, internal errors."""
    s = dict(procs=0, snapshots=0, launches=0, fam={}, swapped=0, fallbacks=0, reasons={}, internal_errors=0,
             pooled=0, passthrough=0, peak_physical_mib=0.0, peak_live_mib=0.0, top=[],
             peak_tier_mib=0.0, tier_moved_mib=0.0, tier_holds=0, tier_refusals=0,
             ipc_exports=0, ipc_opens=0, ipc_errors=0, devices=set())
    for p in glob.glob(os.path.join(runs, name + ".stats-*.json")):
        j = load(p)
        if not j:
            continue
        s["procs"] += 1
        # PONYTAIL_STATS_EVERY: a process the engine killed (SIGKILL) left its last snapshot
        s["snapshots"] += j.get("written") == "snapshot"
        k = j.get("kernels", {})
        s["launches"] += k.get("launches", 0)
        for t in k.get("top", []):
            f = family(t["name"])
            s["fam"][f] = s["fam"].get(f, 0) + t["launches"]
            s["top"].append((t["launches"], t["name"][:90]))
        s["swapped"] += k.get("swapped", 0)
        s["fallbacks"] += k.get("fallbacks", 0)
        for why, n in (k.get("fallback_reasons") or {}).items():
            s["reasons"][why] = s["reasons"].get(why, 0) + n
        s["internal_errors"] += j.get("internal_errors", 0)
        a = j.get("alloc", {})
        s["pooled"] += a.get("pooled_allocs", 0)
        s["passthrough"] += a.get("passthrough_allocs", 0)
        s["peak_physical_mib"] = max(s["peak_physical_mib"], a.get("peak_physical_bytes", 0) / 2**20)
        s["peak_live_mib"] = max(s["peak_live_mib"], a.get("peak_live_bytes", 0) / 2**20)
        # PONYTAIL_HOST_TIER: what lived on the host, what moved back and at what cost
        s["peak_tier_mib"] = max(s["peak_tier_mib"], a.get("peak_tier_bytes", 0) / 2**20)
        s["tier_moved_mib"] += a.get("tier_moved_bytes", 0) / 2**20
        s["tier_holds"] += a.get("tier_holds", 0)
        s["tier_refusals"] += a.get("tier_refusals", 0)
        # tensor parallel (issue 53): the custom all-reduce's CUDA IPC of pooled buffers
        for k in ("ipc_exports", "ipc_opens", "ipc_errors"):
            s[k] += a.get(k, 0)
        s["devices"].update(d.get("device") for d in a.get("devices", []) if d.get("pooled_allocs"))
    s["top"].sort(reverse=True)
    return s


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, f="%.1f"):
    return "-" if x is None else f % x


def tps(r):
    """Output tokens/s of an arm: the median of its throughput passes after the first (the first
    warms the engine's batch shapes; a lone pass counts as it is), or a serve arm's second wave."""
    tp = r.get("throughput")
    if not tp:
        return r.get("wave2_out_tok_s")
    return med([x["out_tok_s"] for x in (tp[1:] if len(tp) > 1 else tp)])


def pool_work_warm(r):
    """The shim's pool work summed over an arm's warm throughput passes (the passes' "pool"
    deltas: grows, trims, syncs, map_ns, ...), or None when the arm has none."""
    tp = [x.get("pool") for x in (r.get("throughput") or [])[1:]]
    if not tp or not all(tp):
        return None
    return {k: sum(x.get(k, 0) for x in tp) for k in tp[0]}


def tps_range(r):
    """(min, max) output tokens/s of an arm's warm passes (all but the first), or None."""
    tp = (r.get("throughput") or [])[1:]
    return (min(x["out_tok_s"] for x in tp), max(x["out_tok_s"] for x in tp)) if tp else None


def kv_tokens(r):
    if r.get("kv_cache_tokens"):
        return r["kv_cache_tokens"]
    if r.get("kv_blocks") and r.get("block_size"):
        return r["kv_blocks"] * r["block_size"]
    return None


# The start-up phases vLLM logs (workload.LOG_PATTERNS, parse_log), in the order they run.
PHASES = (("init_s", "LLM()"), ("init_engine_s", "engine init"), ("model_load_s", "load"),
          ("compile_s", "compile"), ("graph_capture_s", "capture"), ("warmup_after_capture_s", "after capture"))


def startup_key(results):
    """The start-up figure arms are compared by: the LLM() constructor (offline arms), the
    server's readiness (serve arms), else the engine core's own "init engine ... took" line
    (`vllm bench`, which reports neither)."""
    return next((k for k in ("init_s", "ready_s") if any(r.get(k) is not None for r in results)),
                "init_engine_s")


def startup_phases(rs):
    """Lines: per arm kind, the medians over its warm arms of each start-up phase, and the ratio
    of each kind's start-up to stock's (how a shim arm's start-up splits; `off` isolates what
    loading the library costs). The start-up is one figure for the whole stage (startup_key)."""
    kinds = []
    for _, arm, _, _ in rs:
        if arm not in kinds:
            kinds.append(arm)
    key = startup_key([r for _, _, r, _ in rs if r.get("ok")])
    warm = {k: [r for _, arm, r, _ in rs if arm == k and r.get("ok") and not r.get("cold_compile")] for k in kinds}
    base = med([r.get(key) for r in warm.get("stock", [])])
    out = ["  start-up phases, s (median of warm arms; cold arms apart): " + "  ".join(
        label for _, label in PHASES) + "; ratios and spreads of %s" % key]
    for kind in kinds:
        cold = [r for _, arm, r, _ in rs if arm == kind and r.get("ok") and r.get("cold_compile")]
        m = {k: med([r.get(k) for r in warm[kind]]) for k, _ in PHASES}
        v = [r.get(key) for r in warm[kind] if r.get(key)]
        mk = med(v)
        out.append("  %-6s %d warm%s: %s%s%s" % (
            kind, len(warm[kind]), " + %d cold" % len(cold) if cold else "",
            "  ".join(fmt(m[k], "%.2f") for k, _ in PHASES),
            "  (%s/stock %.3f)" % (kind, mk / base) if base and mk and kind != "stock" else "",
            "  (spread %.3f)" % ((max(v) - min(v)) / med(v)) if len(v) > 1 else ""))
    return out


def cache_growth(runs, stage, rs):
    """Lines: after each arm, the cache directories that changed (the arm's .caches snapshot
    against the one before it): a first arm of a kind that starts cold names the cache it
    filled. A directory the snapshot lost (gone, or unreadable) is said so."""
    def snap(path):
        d = {}
        try:
            with open(path) as f:
                for ln in f:
                    parts = ln.split(None, 2)
                    if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                        d[parts[2].strip()] = (int(parts[0]), int(parts[1]))
        except OSError:
            return None
        return d
    prev = snap(os.path.join(runs, stage + ".0.caches"))
    out = []
    for _, _, _, name in rs:
        cur = snap(os.path.join(runs, name + ".caches"))
        if cur is None:
            continue
        if prev is not None:
            moved = sorted(((b - prev.get(p, (0, 0))[0], f - prev.get(p, (0, 0))[1], p)
                            for p, (b, f) in cur.items() if (b, f) != prev.get(p, (0, 0))),
                           key=lambda x: -abs(x[0]))
            gone = sorted(p for p in prev if p not in cur)
            out.append("  caches after %-14s %s%s" % (name + ":", "; ".join(
                "%s %s %+d files" % (p, ("%+.1f MiB" % (b / 2**20)) if abs(b) >= 2**20 else "%+.1f KiB" % (b / 1024), f)
                for b, f, p in moved[:4]) or "none changed",
                ("; gone: " + ", ".join(gone[:3])) if gone else ""))
        prev = cur
    return out


def main():
    runs = sys.argv[1]
    stages = arms(runs)
    fails = []
    lines = []
    w = lines.append
    w("%-11s %-6s %-3s %7s %7s %9s %8s %9s %9s %s" % (
        "stage", "arm", "ok", "init s", "ready s", "KV tokens", "NVML MiB", "tok/s", "tokens", "notes"))
    for stage, rs in stages.items():
        if stage == "fa3":
            continue
        ref = next((r for _, arm, r, _ in rs if arm == "stock" and r.get("ok")), None)
        for n, arm, r, name in rs:
            tok_s = tps(r)
            cmp = compare_tokens(ref, r) if ref is not None and r is not ref else None
            notes = []
            if r.get("cold_compile"):
                wu = r.get("warmup_after_capture_s")
                notes.append("cold compile" if not wu or wu <= COLD_WARMUP_S
                             else "cold (%d s warm-up after capture)" % wu)
            if r.get("psleep"):  # the shim's own sleep of the engine core (--ponytail-sleep)
                ps = r["psleep"]
                notes.append("ponytail sleep: %.0f MiB of the pool (%.0f copied) in %s s; " % (
                    ps.get("bytes", 0) / 2**20, ps.get("copied_bytes", 0) / 2**20, r.get("sleep_s")))
            if r.get("sleep") or r.get("psleep"):
                wc = r.get("wake_cmp")
                notes.append("sleep freed %s MiB in %s s, wake %s s, after wake: %s" % (
                    r.get("sleep_freed_mib"), r.get("sleep_s"), r.get("wake_s"),
                    compare_text(wc) if wc else r.get("wake_same")))
                if r.get("ok") and not r.get("wake_same") and (not wc or wc["differ"]):
                    fails.append("%s: tokens changed after sleep/wake" % name)
            if r.get("pprep"):  # a second cycle, its host memory got ahead (ponytail sleep --prepare)
                p2, wc2 = r.get("psleep2") or {}, r.get("wake2_cmp")
                notes.append("prepared: %.0f MiB got in %s s while it ran, then sleep %s s (%.0f MiB into "
                             "prepared memory), wake %s s, after: %s" % (
                                 r["pprep"].get("bytes", 0) / 2**20, r.get("prep_s"), r.get("sleep2_s"),
                                 p2.get("reused_bytes", 0) / 2**20, r.get("wake2_s"),
                                 compare_text(wc2) if wc2 else r.get("wake2_same")))
                if r.get("ok") and not r.get("wake2_same") and (not wc2 or wc2["differ"]):
                    fails.append("%s: tokens changed after the prepared sleep/wake" % name)
            if "wave2_same_as_wave1" in r:
                notes.append("waves same: %s" % r["wave2_same_as_wave1"])
            if r.get("failed"):
                notes.append("%d requests failed: %s" % (len(r["failed"]), r["failed"][0][:240]))
            if r.get("not_run"):
                notes.append("NOT RUN (out of time)")
            elif not r.get("ok"):
                notes.append("ERROR " + (r.get("error") or "; ".join(r.get("error_lines", [])[-2:]) or "?")[:160])
            w("%-11s %-6s %-3s %7s %7s %9s %8s %9s %9s %s" % (
                stage, "%d %s" % (n, arm), "yes" if r.get("ok") else "NO", fmt(r.get("init_s")),
                fmt(r.get("ready_s")), fmt(kv_tokens(r), "%d"), fmt(r.get("nvml_peak_mib"), "%d"),
                fmt(tok_s, "%.0f"), compare_text(cmp) if cmp else ("ref" if r is ref else "-"),
                "; ".join(notes)))
            if arm in LOADED_ARMS and ref is not None and not r.get("ok") and not r.get("not_run"):
                fails.append("%s: ran stock, failed under the shim" % name)
            elif not r.get("ok") and not r.get("not_run"):
                # A stock failure (or a shim arm with no stock run to stand on) leaves nothing
                # compared: the check has not done its job, so it cannot pass.
                fails.append("%s: failed (%s)" % (name, "stock: nothing to compare" if arm == "stock"
                                                  else "no working stock arm to compare with"))
            if arm in LOADED_ARMS and cmp and cmp["differ"]:
                fails.append("%s: %d of %d token sequences differ from stock (not at a near tie: first "
                             "differences [seq, pos, margin] %s)" % (name, cmp["differ"], cmp["n"],
                                                                     cmp["first_diffs"][:4]))
        # stage summary: ratios of shim to stock over the warm arms
        st = [r for _, arm, r, _ in rs if arm == "stock" and r.get("ok")]
        sh = [r for _, arm, r, _ in rs if arm in SHIM_ARMS and r.get("ok")]
        side = "/".join(sorted({arm for _, arm, _, _ in rs if arm in SHIM_ARMS})) or "shim"
        if st and sh:
            warm_st = [r for r in st if not r.get("cold_compile")]
            warm_sh = [r for r in sh if not r.get("cold_compile")]
            warm = "warm arms" if warm_st and warm_sh else "a cold arm included: not comparable"
            warm_st, warm_sh = warm_st or st, warm_sh or sh
            key = startup_key(st)
            i_st, i_sh = med([r.get(key) for r in warm_st]), med([r.get(key) for r in warm_sh])
            # Memory from the same arms as start-up: a compile-cold arm profiles a larger activation
            # peak and sizes a smaller KV cache (2026-12-07: stock's cold arm 1,212,064 tokens and
            # 42,263 MiB against 1,213,664 and 42,327 in every warm arm of both kinds; the median
            # over all arms had read the shim 32 MiB over stock).
            kv_st, kv_sh = med([kv_tokens(r) for r in warm_st]), med([kv_tokens(r) for r in warm_sh])
            nv_st, nv_sh = (med([r.get("nvml_peak_mib") for r in warm_st]),
                            med([r.get("nvml_peak_mib") for r in warm_sh]))
            t_st, t_sh = med([tps(r) for r in st]), med([tps(r) for r in sh])
            ranges = [tps_range(r) for r in st + sh]
            passes = ""
            if all(ranges) and ranges:
                lo, hi = min(x[0] for x in ranges[:len(st)]), max(x[1] for x in ranges[:len(st)])
                lo2, hi2 = min(x[0] for x in ranges[len(st):]), max(x[1] for x in ranges[len(st):])
                passes = " (warm passes: stock %.0f-%.0f, %s %.0f-%.0f)" % (lo, hi, side, lo2, hi2)
            works = [pool_work_warm(r) for r in sh]
            if works and all(works):
                passes += " (shim pool in warm passes: %d grows, %d trims, %d syncs, %.1f ms mapping)" % (
                    sum(w["grows"] for w in works), sum(w["trims"] for w in works),
                    sum(w["syncs"] for w in works), sum(w["map_ns"] for w in works) / 1e6)
            spread = None
            if len(st) > 1 and all(tps(r) for r in st):
                v = [tps(r) for r in st]
                spread = (max(v) - min(v)) / med(v)
            # start-up's own stock-vs-stock spread over the warm stock arms (the goal is <= 1.05x)
            iv = [r.get(key) for r in warm_st if r.get(key)]
            if len(iv) > 1 and warm == "warm arms":
                warm += ", stock-vs-stock %.3f" % ((max(iv) - min(iv)) / med(iv))
            w("%-11s summary: start-up %s/stock %s (%s, %s), KV tokens %s vs %s, NVML peak %s vs %s MiB, "
              "tok/s %s/stock %s%s" % (
                  stage, side, fmt(i_sh / i_st if i_st and i_sh else None, "%.3f"), key, warm, fmt(kv_sh, "%d"),
                  fmt(kv_st, "%d"), fmt(nv_sh, "%d"), fmt(nv_st, "%d"),
                  side, fmt(t_sh / t_st if t_st and t_sh else None, "%.3f"),
                  passes + ("" if spread is None else " (stock-vs-stock spread %.3f)" % spread)))
    for stage, rs in stages.items():  # start-up split by phase where a stage asks (the off arm, caches)
        caches = cache_growth(runs, stage, rs)
        if caches or any(arm == "off" for _, arm, _, _ in rs):
            w("%s:" % stage)
            for ln in startup_phases(rs) + caches:
                w(ln)
    w("tokens: sequences identical to stock's / all; '+k ties': sequences that part at a near tie "
      "(the other token within %.2f nats at the first difference; stock does so against itself)" % TIE)
    # what the shim saw, per shim arm
    w("")
    w("shim: processes with stats, launches by kernel family (top-50 kernels of each process), swaps, "
      "fallbacks, pool")
    for stage, rs in stages.items():
        for n, arm, r, name in rs:
            if arm not in SHIM_ARMS and stage != "fa3":
                continue
            s = shim_stats(runs, name)
            if not s["procs"]:
                if arm in SHIM_ARMS:
                    w("  %-18s no stats file (the process did not exit normally?)" % name)
                continue
            fam = ", ".join("%s %d" % kv for kv in sorted(s["fam"].items(), key=lambda kv: -kv[1]))
            w("  %-18s procs %d (%d from a snapshot: killed), launches %d (%s); swapped %d, fallbacks %d%s; pooled %d, passthrough %d, "
              "pool peak physical %.0f MiB / live %.0f MiB; internal errors %d" % (
                  name, s["procs"], s["snapshots"], s["launches"], fam, s["swapped"], s["fallbacks"],
                  (" [" + "; ".join("%s: %d" % kv for kv in s["reasons"].items()) + "]") if s["reasons"] else "",
                  s["pooled"], s["passthrough"], s["peak_physical_mib"], s["peak_live_mib"], s["internal_errors"]))
            if s["fam"].get("FA3") and not s["swapped"] and not s["fallbacks"]:
                # Not a fallback: no hook knows the engine's attention kernels, so it ran as stock.
                w("  %-18s attention: %d FA3 launches (of the top kernels), none hooked: the engine's "
                  "attention ran as stock" % ("", s["fam"]["FA3"]))
            if s["peak_tier_mib"] or s["tier_refusals"]:
                w("  %-18s host tier: peak %.0f MiB on the host, %.0f MiB moved back in %d hold(s), %d refused" % (
                    "", s["peak_tier_mib"], s["tier_moved_mib"], s["tier_holds"], s["tier_refusals"]))
            if s["ipc_exports"] or s["ipc_opens"] or s["ipc_errors"] or len(s["devices"]) > 1:
                w("  %-18s pools on devices %s; CUDA IPC of pooled memory: %d exports, %d opens, %d errors" % (
                    "", ",".join(str(d) for d in sorted(s["devices"])), s["ipc_exports"], s["ipc_opens"],
                    s["ipc_errors"]))
            if s["ipc_errors"]:
                fails.append("%s: %d CUDA IPC calls on pooled memory failed" % (name, s["ipc_errors"]))
            if s["internal_errors"]:
                fails.append("%s: the shim counted %d internal errors" % (name, s["internal_errors"]))
    fa3 = os.path.join(runs, "fa3_decode.txt")
    if os.path.exists(fa3):
        w("")
        with open(fa3) as f:
            text = f.read().rstrip()
        w(text)
        if "FAIL" in text:
            fails.append("fa3_decode: a kernel failed its correctness check")
    w("")
    w("serving check: %s" % ("PASS" if not fails else "FAIL: " + "; ".join(fails)))
    print("\n".join(lines))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
