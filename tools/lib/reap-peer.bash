# Sourced by tools/local-ring, tools/netns-cluster and tools/fuzz: waits for their children one by one.
#
#   reap_next_peer   # needs the array `live` (pids); sets done_pid and rc (its status)
#
# Not `wait -n -p`: bash 5.2 (Debian 12) once blocked in it after every listed pid had
# exited and been reaped (all 4 netns peers gone, the run stuck until --timeout: the
# "intermittent comm-bench hang"; trigger unknown). This polls instead: a pid
# that is gone has been reaped, and `wait PID` returns the status bash kept for it.
# The pid is removed from `live`. Traps run within 0.2 s (between polls).
reap_next_peer() {
  local j
  done_pid=""
  rc=0
  while [[ -z $done_pid ]]; do
    for j in "${!live[@]}"; do
      if ! kill -0 "${live[$j]}" 2>/dev/null; then
        done_pid=${live[$j]}
        unset "live[$j]"
        wait "$done_pid" || rc=$?
        return 0
      fi
    done
    sleep 0.2
  done
}
