#!/usr/bin/env bash
# One device call's worth of GPU work for the open GPU issues, in parts that each fit a 600 s call.
#
# Here:   ../shared/tools/gpu-bundle          (builds .gpu-bundle/ and .gpu-bundle.tgz)
# There:  run with carry [".gpu-bundle.tgz"] and the command
#           tar xzf .gpu-bundle.tgz && bash tools/gpu-session.sh PART...
#
# Parts (each prints one line per result; what a part writes goes under $OUT when set):
#   tests    (within $TESTS_SECONDS, default 540) the suites with GPU tests, whole (SEQSYNC_REQUIRE_GPU=1: a missing GPU fails), the
#            CUDA and GPU tests of the others, then the CUDA tests of the timeline, graph,
#            memory, demo and ipc suites under each timeline mechanism (events, hybrid,
#            memops); within 540 s, naming what it had no time for
#   targets  issue 22's three targets per size, with the phases of each run
#            (tools/small-batch-targets.py)                                   (about 3 minutes)
#   scan     the adaptive engine's slot wait (host, device) then depth x K per size, saturated,
#            no baselines: GB/s, latency and where it went (before_launch, slot_wait,
#            on_device, before_check, check p50)
#   span     K (batches a launch) above the span (batches a node, the device bound's merge) at
#            64 and 256 KiB, saturated, no baselines: does amortizing a launch over more runs
#            of the same nodes lift throughput?
#   resident the resident engine's slots x process_data threads per size, saturated, no
#            baselines (ENGINE=resident scan_one)
#   copies   the resident engine copying in place (kernel) and by the copy engines (memcpy) at
#            1, 4 and 16 MiB, with baselines: GB/s, x the device bound, x copies together, p99
#   sweep    `seqsync demo --sweep` on CUDA: the README's plot, to $OUT/sweep.{json,svg}
set -uo pipefail
cd "$(dirname "$0")/.."
B=${SEQSYNC_BIN:-./.gpu-bundle/bin/seqsync}
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"

# Runs test executable $2 with filters $3... under a label $1, within what is left of the part's
# deadline (at most 150 s); prints one line.
suite() {
  local label=$1 t=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) ))
  [ -x ".gpu-bundle/tests/$t" ] || { echo "$label: not in the bundle"; return; }
  [ $left -gt 10 ] || { echo "$label: skipped (the part's 540 s are spent)"; return; }
  [ $left -gt 150 ] && left=150
  local s=$(date +%s) log=$OUT/suite.log
  timeout $left ".gpu-bundle/tests/$t" --test-threads=2 "$@" > "$log" 2>&1
  # The failures, each panic with its message (the lines after it), and the summary.
  local r=$(grep -E "^test .* FAILED" "$log"; grep -A2 "panicked" "$log" | grep -v "^note:" | cut -c1-300 | head -15; grep "test result" "$log")
  echo "$label ($(( $(date +%s) - s )) s): ${r:-no result (timed out after $left s?)}"
  if ! grep -q "test result" "$log"; then
    # Which tests never reported: the ones still running when the time ran out.
    ".gpu-bundle/tests/$t" --list "$@" 2>/dev/null | sed -n 's/: test$//p' | sort > "$log.all"
    sed -n 's/^test \(.*\) \.\.\. .*/\1/p' "$log" | sort > "$log.done"
    echo "  still running: $(comm -23 "$log.all" "$log.done" | head -5 | tr '\n' ' ')"
  fi
}

tests() (
  # A subshell: the variable stays with this part.
  export SEQSYNC_REQUIRE_GPU=1
  DEADLINE=$(( $(date +%s) + ${TESTS_SECONDS:-540} ))
  for t in backend ring timeline graph memory ipc demo cuda_fault; do suite "$t" "$t"; done
  for t in cli source seqsync-lib seqsync_demo-lib; do suite "$t (cuda, gpu)" "$t" cuda gpu; done
  for m in events hybrid memops; do
    for t in timeline graph memory demo ipc; do
      SEQSYNC_TIMELINE_MECHANISM=$m suite "$m $t (cuda)" "$t" cuda
    done
  done
)

targets() {
  python3 tools/small-batch-targets.py "$B"
}

# One saturated adaptive run: bytes, then extra flags.
scan_one() {
  local bytes=$1; shift
  local n=$((393216000 / bytes)); [ $n -gt 6000 ] && n=6000
  if ! "$B" demo --backend cuda --engine "${ENGINE:-adaptive}" --batch-bytes "$bytes" --batches $n --json \
      --no-baselines "$@" > "$OUT/scan.json" 2> "$OUT/scan.err"; then
    echo "FAILED $bytes $*: $(tail -c 300 "$OUT/scan.err")"; return
  fi
  python3 - "$OUT/scan.json" "$*" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ph = {p["phase"]: p["p50_us"] for p in d.get("phases") or []}
cols = " ".join(f"{k} {ph.get(k, 0):.1f}" for k in
                ["before_launch", "slot_wait", "launch", "on_device", "before_check", "check"])
print(f'{d["batch_bytes"] >> 10:5d}K {sys.argv[2]:38s} {d["gbps"]:6.2f} GB/s '
      f'p50 {d["latency_p50_us"]:7.1f} p99 {d["latency_p99_us"]:7.1f} slots {d["nin"]} '
      f'bpl {d.get("batches_per_launch") or 0:.2f} ok {d["verified"]}/{d["batches"]} | p50s: {cols}')
PY
}

scan() {
  # Where the launches wait for their slots (device: enqueued up to S batches ahead), first.
  for w in host device; do for b in 65536 262144; do scan_one $b --slot-wait $w; done; done
  scan_one 1048576 --release device --slot-wait device
  for d in 2 3 4 6 8; do for k in 4 8 16; do scan_one 65536 --graph-depth $d --graph-batches $k; done; done
  for d in 2 3 4 6; do for k in 2 4 8; do scan_one 262144 --graph-depth $d --graph-batches $k; done; done
  for d in 2 3 4 6; do for k in 1 2 4; do scan_one 1048576 --graph-depth $d --graph-batches $k; done; done
  scan_one 4194304
}

span() {
  for b in 65536 262144; do
    for k in 4 8 16; do for d in 3 6; do scan_one $b --graph-span 4 --graph-batches $k --graph-depth $d; done; done
  done
}

# The resident engine: slots x process_data threads per size, saturated, no baselines.
resident() {
  for b in 65536 262144 1048576; do
    for t in 4 8 12; do for s in 8 16 32 64; do
      ENGINE=resident scan_one $b --slots $s --process-threads $t
    done; done
  done
}

# The resident engine's two ways of copying, with baselines, at 1, 4 and 16 MiB.
copies() {
  for b in 1048576 4194304 16777216; do for c in kernel memcpy; do
    local n=$((393216000 / b))
    if ! "$B" demo --backend cuda --engine resident --copy $c --batch-bytes $b --batches $n \
        --json > "$OUT/copies.json" 2> "$OUT/copies.err"; then
      echo "FAILED $b $c: $(tail -c 300 "$OUT/copies.err")"; continue
    fi
    python3 - "$OUT/copies.json" "$c" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f'{d["batch_bytes"] >> 10:6d}K {sys.argv[2]:6s} {d["gbps"]:6.2f} GB/s '
      f'x bound {d.get("ratio_to_device_bound") or 0:.3f} ({d.get("device_bound_by")}) '
      f'x copies together {d["gbps"] / (d.get("copies_bound_gbps") or float("nan")):.3f} '
      f'p50 {d["latency_p50_us"]:7.1f} p99 {d["latency_p99_us"]:7.1f} slots {d["nin"]} '
      f'ok {d["verified"]}/{d["batches"]}')
PY
  done; done
}

sweep() {
  "$B" demo --backend cuda --sweep --sweep-out "$OUT/sweep" 2>&1 | tail -40
}

[ $# -gt 0 ] || set -- tests
for part in "$@"; do
  echo "===== $part"
  case $part in
    tests|targets|scan|span|resident|copies|sweep) $part ;;
    *) echo "unknown part '$part': expected tests, targets, scan, span, resident, copies or sweep"; exit 2 ;;
  esac
done
