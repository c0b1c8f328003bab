#!/bin/sh
# The VM side of the VM test tier: run as /task/run.sh by the image's vm-task unit at
# every boot. It asks the test on the host (10.0.2.2:$CTL_PORT, plain HTTP, see
# tests/support/vm.rs) for shell scripts, runs each as root and posts back its exit
# code and output, so the test drives the node step by step. A script whose first
# line is "#exit N" ends this loop with code N: 0 powers the VM off, 100 reboots it
# (this script then runs again with VM_BOOT=2, 3, ...).
. /task/task.env
ctl="http://10.0.2.2:$CTL_PORT"
seq=0
while :; do
  # Long poll: the host answers with "<seq>\n<script>" or an empty body after a while.
  if ! curl -sf --max-time 60 -o /tmp/vm-cmd "$ctl/next?boot=$VM_BOOT&after=$seq"; then
    sleep 1; continue
  fi
  [ -s /tmp/vm-cmd ] || continue
  n=$(head -n 1 /tmp/vm-cmd)
  tail -n +2 /tmp/vm-cmd > /tmp/vm-cmd.sh
  first=$(head -n 1 /tmp/vm-cmd.sh)
  case "$first" in
    "#exit "*)
      code=${first#"#exit "}
      echo "leaving the loop with $code" > /tmp/vm-out
      curl -sf --max-time 30 -H "Expect:" --data-binary @/tmp/vm-out "$ctl/result?seq=$n&rc=0" >/dev/null
      sync; exit "$code" ;;
  esac
  echo "--- step $n"
  sh /tmp/vm-cmd.sh > /tmp/vm-out 2>&1; rc=$?
  tail -n 20 /tmp/vm-out
  echo "--- step $n: exit $rc"
  # The host may be busy: retry the answer until it is taken.
  until curl -sf --max-time 30 -H "Expect:" --data-binary @/tmp/vm-out "$ctl/result?seq=$n&rc=$rc" >/dev/null; do
    sleep 1
  done
  seq=$n
done
