# lib-lock.sh, sourced by the scripts that publish idemkit's modules into
# the shared Go module cache (collector-build.sh, consumer-test.sh).
# Publishing removes the release version of the idemkit modules from the
# cache, so only one publish-and-build runs at a time per machine (every
# checkout and worktree shares the cache).
#
# modcache_lock WHO takes that lock on file descriptor 9 (held until the
# calling script exits). When another process holds it, WHO says so on
# stderr, naming the holder (its pid, command, folder and how long it has
# run) and, every 30 seconds while it waits, that it still waits.
modcache_lock() {
  local who="$1" lock="${TMPDIR:-/tmp}/idemkit-modcache.lock" start=$SECONDS
  exec 9>>"$lock"
  if ! flock -n 9; then
    echo "$who: waiting for $lock, $(modcache_lock_holder "$lock")" >&2
    echo "$who: (another checkout publishes idemkit's modules into the shared Go module cache, or builds from them: one at a time per machine)" >&2
    until flock -w 30 9; do
      echo "$who: still waiting for $lock after $((SECONDS - start))s, $(modcache_lock_holder "$lock")" >&2
    done
    echo "$who: got $lock after waiting $((SECONDS - start))s" >&2
  fi
  printf 'pid %s (%s, in %s, since %s)\n' "$$" "$who" "$PWD" "$(date +%T)" >"$lock.holder"
}

# modcache_lock_holder LOCK describes the process holding LOCK, from the
# note the holder wrote beside it when it took it (lslocks would name the
# flock command that took the lock, long gone): its pid, what it is, its
# folder, since when and for how long. A holder that wrote no note (a
# script from before the note) is looked for among the processes that have
# LOCK open (fuser).
modcache_lock_holder() {
  local lock="$1" pid="" others=""
  if [[ -s "$lock.holder" ]]; then
    pid="$(sed -n '1s/^pid \([0-9]*\) .*/\1/p' "$lock.holder")"
  fi
  if [[ -n "$pid" ]] && ps -p "$pid" >/dev/null 2>&1; then
    printf 'held by %s, running for %s' "$(head -n 1 "$lock.holder")" "$(ps -o etime= -p "$pid" | tr -d ' ')"
    return
  fi
  if command -v fuser >/dev/null; then
    for pid in $(fuser "$lock" 2>/dev/null); do
      [[ "$pid" == "$$" ]] && continue
      others+="${others:+; }pid $pid ($(ps -o args= -p "$pid" 2>/dev/null | cut -c1-80), in $(readlink "/proc/$pid/cwd" 2>/dev/null || echo '?'))"
    done
  fi
  if [[ -n "$others" ]]; then
    printf 'held by one of: %s' "$others"
  else
    printf 'held by another process'
  fi
}
