# procs.sh: the background processes of a script (sourced by demo.sh and
# dashboards-test.sh). The sourcing script defines die MESSAGE and calls
# stop_all from its EXIT trap.

# Processes started with start, stopped in reverse order by stop_all.
pids=()
names=()

# start NAME LOG CMD...: starts CMD in the background, output to LOG, and
# remembers it; its pid is ${pids[-1]}.
start() {
  local name=$1 log=$2
  shift 2
  "$@" >"$log" 2>&1 &
  pids+=("$!")
  names+=("$name")
}

# stop_process PID NAME [TIMEOUT_S]: SIGTERM, then SIGKILL after TIMEOUT_S
# (default 15) seconds.
stop_process() {
  local pid=$1 name=$2 timeout=${3:-15} i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < timeout * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  echo "$(basename "$0"): $name (pid $pid) did not stop in ${timeout} s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# stop_all [TIMEOUT_S]: stops every started process, the last started first.
stop_all() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    stop_process "${pids[$i]}" "${names[$i]}" "${1:-15}"
  done
}

# listening PORT: something accepts TCP connections on 127.0.0.1:PORT.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port VAR: sets VAR to a TCP port on 127.0.0.1 that nothing listens
# on and that no earlier free_port of this script chose. (It sets a variable
# rather than printing: a $(...) subshell would forget the ports chosen.)
used_ports=()
free_port() {
  local _fp_port _fp_i # names a caller's VAR will not use
  for ((_fp_i = 0; _fp_i < 200; _fp_i++)); do
    _fp_port=$((20000 + RANDOM % 40000))
    if ! listening "$_fp_port" && [[ " ${used_ports[*]:-} " != *" $_fp_port "* ]]; then
      used_ports+=("$_fp_port")
      printf -v "$1" '%s' "$_fp_port"
      return 0
    fi
  done
  die "found no free TCP port"
}

# wait_for WHAT TIMEOUT_S PID LOG TEST...: waits until TEST succeeds; dies
# with the last lines of LOG when PID exits first or TIMEOUT_S passes.
wait_for() {
  local what=$1 timeout=$2 pid=$3 log=$4
  shift 4
  local deadline=$((SECONDS + timeout))
  until "$@" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "--- last lines of $log" >&2; tail -n 30 "$log" >&2 || true
      die "$what exited before it was ready (log: $log)"
    fi
    if ((SECONDS > deadline)); then
      echo "--- last lines of $log" >&2; tail -n 30 "$log" >&2 || true
      die "$what was not ready after ${timeout}s (log: $log)"
    fi
    sleep 0.1
  done
}
