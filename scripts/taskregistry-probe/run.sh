#!/usr/bin/env bash
# Measures Foundation's TaskRegistry crash (URLSessionTask.cancel() racing the task's failure) with probe.swift;
# see docs/reliability.md. Usage: scripts/taskregistry-probe/run.sh FAULT VARIANT PROCESSES TASKS [probe options]
#   FAULT: refused | rst | fin | midbody | late; VARIANT: A (cancel at 0–5 ms) | B (the same, task cancelled 50 ms later)
# Runs the processes one after another and appends one CSV row each to results.csv in the current directory:
# fault,variant,index,exit code,crashed,TaskRegistry message,cancels,live cancels,exact count,options
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
probe="$here/../../.build/taskregistry-probe"
if [ ! -x "$probe" ]; then
  mkdir -p "$(dirname "$probe")"
  swiftc -O -swift-version 5 "$here/probe.swift" -o "$probe" || exit 2
fi
FAULT=$1; VARIANT=$2; N=$3; TASKS=$4; shift 4; EXTRA="$*"
logs=$(mktemp -d)
export SWIFT_BACKTRACE=enable=no
for i in $(seq 1 "$N"); do
  out=$logs/$i.out; err=$logs/$i.err
  timeout 300 "$probe" --fault "$FAULT" --variant "$VARIANT" --tasks "$TASKS" $EXTRA >"$out" 2>"$err"
  rc=$?
  crashed=0; [ $rc -ge 128 ] && crashed=1
  message=0; grep -q "TaskRegistry.swift:118: Fatal error: Trying to access a behaviour" "$err" && message=1
  if grep -q '^RESULT' "$out"; then
    cancels=$(grep '^RESULT' "$out" | sed -E 's/.*cancels=([0-9]+).*/\1/')
    states=$(grep '^RESULT' "$out" | sed -E 's/.*=\[([0-9]+), ([0-9]+), [0-9]+, [0-9]+\].*/\1 \2/')
    live=$(( $(echo $states | cut -d' ' -f1) + $(echo $states | cut -d' ' -f2) ))
    exact=1
  else
    # Crashed: the last progress line is a lower bound, within 25.
    last=$(grep '^PROGRESS' "$out" | tail -1)
    cancels=$(echo "$last" | awk '{print $2}'); cancels=${cancels:-0}
    live=$(echo "$last" | sed -E 's/.*live=([0-9]+).*/\1/'); live=${live:-0}
    exact=0
  fi
  echo "$FAULT,$VARIANT,$i,$rc,$crashed,$message,$cancels,$live,$exact,\"$EXTRA\"" >> results.csv
done
rm -rf "$logs"
