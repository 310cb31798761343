# Loopback registries for `make demo` and `make seeds`: sourced, not run.
#
# The caller sets script (demo or seeds) before sourcing it. It changes to the repository
# and sets root (the repository), python (the project's interpreter), env_prefix
# (IMAGEKIT_DEMO or IMAGEKIT_SEEDS, for the port and state variables), state (the folder the
# run's registries, key pair, ledger and evidence live under: .demo or .seeds, or
# ${env_prefix}_STATE when set, so that a test's run never touches a user's folder), shown
# (state as messages name it: relative to the repository when inside it) and log (one line
# to stderr, named after the script). The caller then lists its registries in the array registries, as
# name:port words. Each registry is Debian's docker-registry with its own config: 127.0.0.1
# only, its own storage, no auth (private to this machine), deletes enabled.

called_from=$(pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
python=$root/.venv/bin/python
env_prefix=IMAGEKIT_$(echo "$script" | tr '[:lower:]' '[:upper:]')
state_variable=${env_prefix}_STATE
state=${!state_variable:-$root/.$script}
case "$state" in
  /*) ;;
  *) state=$called_from/$state ;;
esac
state=$(realpath -m -- "$state")
# --purge deletes the folder: never the repository or a folder holding it (/ included).
holder=$state
[ "$holder" = / ] && holder=
case "$root/" in
  "$holder"/*)
    printf '%s: %s_STATE must name a folder of its own, not %s (it holds the repository)\n' \
      "$script" "$env_prefix" "$state" >&2
    exit 2
    ;;
esac
shown=${state#"$root"/}
log() { printf '%s: %s\n' "$script" "$*" >&2; }

stop_all() {
  local entry
  for entry in "${registries[@]}"; do stop_one "${entry%%:*}"; done
}

start_all() {
  local entry
  for entry in "${registries[@]}"; do start_one "${entry%%:*}" "${entry#*:}"; done
}

# Does a registry answer /v2/ on this loopback port? (python: a fresh machine may lack curl)
answers() {
  "$python" -c 'import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/v2/" % sys.argv[1], timeout=2)' "$1" 2>/dev/null
}

stop_one() {
  local name=$1 pidfile=$state/$1/registry.pid
  if [ -f "$pidfile" ]; then
    local pid
    pid=$(cat "$pidfile")
    # Only the process this script started, checked by its command line.
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$state/$name/config.yml"; then
      kill "$pid" && log "stopped registry $name (pid $pid)"
    fi
    rm -f "$pidfile"
  fi
}

start_one() {
  local name=$1 port=$2 dir=$state/$1
  mkdir -p "$dir/data"
  if answers "$port"; then
    if [ -f "$dir/registry.pid" ] && kill -0 "$(cat "$dir/registry.pid")" 2>/dev/null; then
      log "registry $name already answers on 127.0.0.1:$port (reused)"
      return
    fi
    log "127.0.0.1:$port answers but is not this script's registry $name; pick another port with" \
      "${env_prefix}_$(echo "$name" | tr '[:lower:]' '[:upper:]')_PORT"
    exit 3
  fi
  # JSON is YAML.
  cat >"$dir/config.yml" <<CONFIG
{"version": 0.1,
 "log": {"level": "warn", "accesslog": {"disabled": true}},
 "storage": {"filesystem": {"rootdirectory": "$dir/data"}, "delete": {"enabled": true}},
 "http": {"addr": "127.0.0.1:$port"}}
CONFIG
  setsid nohup docker-registry serve "$dir/config.yml" >>"$dir/registry.log" 2>&1 </dev/null &
  echo $! >"$dir/registry.pid"
  for _ in $(seq 1 50); do
    answers "$port" && { log "registry $name started on 127.0.0.1:$port (data in $shown/$name)"; return; }
    sleep 0.2
  done
  log "registry $name did not answer; its log:"
  tail -n 20 "$dir/registry.log" >&2
  exit 3
}
