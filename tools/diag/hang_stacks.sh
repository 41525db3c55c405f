#!/usr/bin/env bash
# Runs test executable $1 ($THREADS tests at a time, default 1; names printed as they start)
# with the remaining arguments; if it is still running after $WAIT seconds (default 40), prints
# the test it is in and every thread's stack (tools/diag/stack_peek.py; symbolize here with addr2line on the
# unstripped binary, vaddr = file offset + 0x1000), then kills it.
set -u
t=$1; shift
log=$(mktemp)
"$t" --test-threads=${THREADS:-1} "$@" > "$log" 2>&1 &
pid=$!
for _ in $(seq "${WAIT:-40}"); do
  sleep 1
  kill -0 $pid 2>/dev/null || { grep -E "test result|FAILED|panicked" "$log"; exit 0; }
done
echo "still running after ${WAIT:-40} s; last lines:"; tail -3 "$log"
python3 "$(dirname "$0")/stack_peek.py" $pid > "${OUT:-/tmp}/stacks.txt" 2>&1; echo "stacks: ${OUT:-/tmp}/stacks.txt ($(wc -l < "${OUT:-/tmp}/stacks.txt") threads)"
kill -9 $pid
