"""The shim's exit stats of a check's runs, one rule for every check that reads them.

A run under the shim writes one JSON file per process (PONYTAIL_STATS=json, PONYTAIL_STATS_FILE
with %p), named TAG.stats.PID.json in the check's output folder: env() gives the settings, read()
the parsed files, and alloc_sums() / kernel_sums() add up the figures of a run's processes.
"""
import json
import os


def env(out, tag):
    """The shim's settings that make a run of TAG leave its stats (and its log) in out."""
    return dict(PONYTAIL_STATS="json", PONYTAIL_STATS_FILE=os.path.join(out, tag + ".stats.%p.json"),
                PONYTAIL_LOG="info", PONYTAIL_LOG_FILE=os.path.join(out, tag + ".log.%p"))


def read(out, tag):
    """Every process's stats of the run TAG, in name order; a file that does not parse (a process
    killed while writing it) is left out."""
    got = []
    for name in sorted(os.listdir(out)):
        if name.startswith(tag + ".stats.") and name.endswith(".json"):
            try:
                with open(os.path.join(out, name)) as f:
                    got.append(json.load(f))
            except (OSError, ValueError):
                pass
    return got


def alloc_sums(stats):
    """The pool's figures ("alloc") over the processes: counts and bytes added up, peaks the
    largest (processes that run one after another do not add their peaks); PyTorch's own mapped
    memory's ("alloc"."torch_vmm") under "torch_vmm.KEY"."""
    got = {}
    for j in stats:
        al = j.get("alloc") or {}
        # PyTorch's own mapped memory (expandable segments, shim/route_vmm.c) as "torch_vmm.KEY".
        items = list(al.items()) + [("torch_vmm." + k, v) for k, v in (al.get("torch_vmm") or {}).items()]
        for k, v in items:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                peak = k.startswith("peak") or k.startswith("torch_vmm.peak")
                got[k] = max(got.get(k, 0), v) if peak else got.get(k, 0) + v
    return got


def kernel_sums(stats):
    """Attention launches swapped and fallback reasons over the processes, the largest pool peak
    in MiB, the internal errors and, under PONYTAIL_ATTN=verify, the launches verified and the
    verify failures."""
    got = {"swapped": 0, "fallback_reasons": {}, "pool_peak_physical_mib": 0.0, "internal_errors": 0,
           "verified": 0, "verify_failures": 0}
    for j in stats:
        h = j.get("hooks") or {}
        got["verified"] += h.get("verified") or 0
        got["verify_failures"] += h.get("verify_failures") or 0
        k = j.get("kernels") or {}
        for r, n in (k.get("fallback_reasons") or {}).items():
            got["fallback_reasons"][r] = got["fallback_reasons"].get(r, 0) + n
        got["swapped"] += sum(t.get("swapped", 0) for t in k.get("hooked") or k.get("top") or [])
        peak = ((j.get("alloc") or {}).get("peak_physical_bytes") or 0) / 2**20
        got["pool_peak_physical_mib"] = max(got["pool_peak_physical_mib"], peak)
        got["internal_errors"] += j.get("internal_errors") or 0
    return got
