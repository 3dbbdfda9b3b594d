#!/usr/bin/env python3
"""One `vllm bench throughput` run as a serving-check arm result (the JSON vllm_report.py reads):
its --output-json (elapsed_time, num_requests, total_num_tokens, tokens_per_second) and the output
token count it prints ("Total num output tokens: N"), as one throughput pass. A run that left no
JSON is an arm that failed, with the log's last error lines.

  bench_result.py BENCH_JSON LOG OUT_JSON
"""
import json
import re
import sys


def result(bench, log_text):
    """The arm's result dict from the bench's JSON (None: missing) and its log text."""
    if not bench or not bench.get("elapsed_time"):
        lines = [l.strip() for l in log_text.splitlines() if l.strip()]
        err = [l for l in lines if "Error" in l or "error:" in l][-2:] or lines[-1:]
        return {"ok": False, "error": "vllm bench throughput left no result: " + " | ".join(err)[:300]}
    s = float(bench["elapsed_time"])
    m = re.findall(r"Total num output tokens:\s*(\d+)", log_text)
    out_tokens = int(m[-1]) if m else None
    run = {"s": round(s, 3), "total_tok_s": round(float(bench["total_num_tokens"]) / s, 1)}
    if out_tokens is not None:
        run["out_tok_s"] = round(out_tokens / s, 1)
    if out_tokens is None:  # the report's throughput rows need output tokens
        return {"ok": False, "bench": bench, "error": "no 'Total num output tokens' line in the log"}
    return {"ok": True, "bench": bench, "throughput": [run]}


def main(argv):
    bench_path, log_path, out_path = argv[1:4]
    try:
        bench = json.load(open(bench_path))
    except (OSError, ValueError):
        bench = None
    try:
        text = open(log_path, errors="replace").read()
    except OSError:
        text = ""
    with open(out_path, "w") as f:
        json.dump(result(bench, text), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
