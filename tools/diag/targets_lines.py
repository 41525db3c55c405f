#!/usr/bin/env python3
"""tools/small-batch-targets.py's JSON lines, one short line each (stdin to stdout).

usage: ... small-batch-targets.py SEQSYNC | tools/diag/targets_lines.py

Per run: batch, extra flags, x bound, GB/s, p99 and the hand-written p99 (x), isolated
latency, the p99 at 80 % and its ratio, the steal (ms) during each of the three runs, the
check's p50/p99, and at 80 % every phase's p50/p99 (the resident engine's `before_launch`:
get_data late, `launch`: its fill, `slot_wait`: its wait for slots); summary and failure
lines as they are.
"""
import json
import sys

for line in sys.stdin:
    d = json.loads(line)
    if "summary" in d or "failed" in d:
        print(line.strip(), flush=True)
        continue
    def f(v, spec):
        return "-" if v is None else format(v, spec)
    rp = d.get("r_phases_p50_p99") or {}
    print(f'{d["bytes"]} [{d["extra"]}] x_bound {d["x_bound"]:.3f} ({d["gbps"]:.1f} GB/s) '
          f'p99 {d["p99"]:.0f} / hw {d["hw_p99"]:.0f} = {d["x_hw_p99"]:.2f}  '
          f'iso {d["isolated"]:.1f} r_p99 {f(d["r_p99"], ".1f")} = {f(d["r_x_iso"], ".2f")}  '
          f'steal {d["steal_ms"]} check {d["phases_p50_p99"].get("check")} '
          f'threads {d["process_threads"]} slots {d["slots"]}  at 80 %: '
          + " ".join(f"{k} {v}" for k, v in rp.items()), flush=True)
