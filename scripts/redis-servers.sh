# shellcheck shell=bash
# Redis servers for the Redis store's tests: a bash library, sourced by
# scripts/test-all (or by hand) and never run on its own.
#
#   source scripts/redis-servers.sh
#   start_redis_servers || exit 1   # exports the addresses below
#   trap stop_redis_servers EXIT
#
# start_redis_servers installs redis-server (and with it redis-cli) as root
# through apt-get if it is missing, then starts, each in a fresh temporary
# directory and listening only on 127.0.0.1:
#   - one redis-server on a free port, and exports
#       IDEMKIT_TEST_REDIS_ADDR            127.0.0.1:PORT
#   - a Redis Cluster of three masters (no replicas), each on a free port
#     whose cluster bus port (PORT+10000) is free too, and exports
#       IDEMKIT_TEST_REDIS_CLUSTER_ADDRS   127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
# If a server cannot start, it says what is missing and returns non-zero:
# nothing is ever skipped silently. stop_redis_servers kills every server it
# started and removes their directories; it is safe to call more than once.
#
# The servers keep nothing on disk (no RDB, no AOF): the store's restart
# test starts a server of its own, with appendonly, for that.

_idemkit_redis_dir=""
_idemkit_redis_pids=()
_idemkit_redis_updated=""

_redis_log() { echo "redis-servers: $*" >&2; }

# _redis_port_free reports whether nothing listens on 127.0.0.1:$1.
_redis_port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# _redis_free_port prints a TCP port that nothing listens on right now; with
# "bus" as its argument, one whose cluster bus port (PORT+10000) is free too.
_redis_free_port() {
  local port tries
  for tries in $(seq 1 200); do
    port=$((20000 + RANDOM % 35000))
    if _redis_port_free "$port" && { [ "${1:-}" != bus ] || _redis_port_free $((port + 10000)); }; then
      echo "$port"
      return
    fi
  done
  _redis_log "no free port found after $tries tries"
  return 1
}

# _redis_install installs the Debian package redis-server, as root only,
# with one apt-get update first.
_redis_install() {
  if [ "$(id -u)" -ne 0 ]; then
    _redis_log "missing: redis-server and redis-cli (run as root, or install them: apt-get install redis-server)"
    return 1
  fi
  if [ -z "$_idemkit_redis_updated" ]; then
    _redis_log "apt-get update"
    apt-get update -qq >/dev/null 2>&1 || _redis_log "apt-get update failed; trying the install anyway"
    _idemkit_redis_updated=1
  fi
  _redis_log "installing redis-server with apt-get"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; then
    _redis_log "apt-get install redis-server failed"
    return 1
  fi
}

_redis_need_binaries() {
  if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    _redis_install || return 1
  fi
  local tool
  for tool in redis-server redis-cli; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      _redis_log "missing: $tool (Debian package redis-server)"
      return 1
    fi
  done
}

# _redis_wait runs a probe command up to 120 times, 0.25 s apart.
_redis_wait() {
  local i
  for i in $(seq 1 120); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.25
  done
  return 1
}

_redis_ping() {
  [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]
}

# _redis_server starts one redis-server on 127.0.0.1:$1 in directory $2,
# with any further arguments, and waits until it answers.
_redis_server() {
  local port=$1 dir=$2
  shift 2
  mkdir -p "$dir" || return 1
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --logfile "$dir/server.log" \
    --save "" --appendonly no --daemonize no "$@" >/dev/null 2>&1 &
  _idemkit_redis_pids+=("$!")
  if ! _redis_wait _redis_ping "$port"; then
    cat "$dir/server.log" >&2 2>/dev/null
    _redis_log "redis-server did not start on 127.0.0.1:$port"
    return 1
  fi
}

_redis_base_dir() {
  if [ -z "$_idemkit_redis_dir" ]; then
    _idemkit_redis_dir=$(mktemp -d /tmp/idemkit-redis.XXXXXX) || return 1
  fi
}

# _redis_server_on_free_port starts a redis-server (arguments after the
# first two as for _redis_server) on a free port, "bus" ($1) or not, in a
# directory named $2 plus the port, and sets _redis_port to the port (not
# printed: a command substitution would run it in a subshell, which would
# lose the server's pid). A port that was free when picked can be taken
# before the server binds it (by another program starting servers at the
# same time), so it tries a few ports.
_redis_server_on_free_port() {
  local kind=$1 dir=$2 port try
  shift 2
  for try in 1 2 3 4 5; do
    port=$(_redis_free_port "$kind") || return 1
    if _redis_server "$port" "$dir$port" "$@"; then
      _redis_port=$port
      return 0
    fi
    _redis_log "retrying on another port (attempt $try)"
  done
  return 1
}

start_redis() {
  _redis_need_binaries || return 1
  _redis_base_dir || return 1
  local port
  _redis_server_on_free_port plain "$_idemkit_redis_dir/single-" || return 1
  port=$_redis_port
  export IDEMKIT_TEST_REDIS_ADDR="127.0.0.1:$port"
  _redis_log "$(redis-server --version | awk '{print $1, $2, $3}') on 127.0.0.1:$port"
}

# _redis_cluster_ok reports whether every node in "$@" sees a healthy
# cluster with all 16384 slots assigned.
_redis_cluster_ok() {
  local port info
  for port in "$@"; do
    info=$(redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null) || return 1
    case $info in
      *cluster_state:ok*) ;;
      *) return 1 ;;
    esac
    case $info in
      *cluster_slots_ok:16384*) ;;
      *) return 1 ;;
    esac
  done
}

start_redis_cluster() {
  _redis_need_binaries || return 1
  _redis_base_dir || return 1
  local ports=() nodes=() port i
  for i in 1 2 3; do
    # The previous node already listens (on its port and its bus port),
    # so the next pick cannot collide with it.
    _redis_server_on_free_port bus "$_idemkit_redis_dir/cluster-" --cluster-enabled yes \
      --cluster-config-file nodes.conf --cluster-node-timeout 5000 || return 1
    port=$_redis_port
    ports+=("$port")
    nodes+=("127.0.0.1:$port")
  done
  if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
    >"$_idemkit_redis_dir/cluster-create.log" 2>&1; then
    cat "$_idemkit_redis_dir/cluster-create.log" >&2
    _redis_log "redis-cli --cluster create failed"
    return 1
  fi
  if ! _redis_wait _redis_cluster_ok "${ports[@]}"; then
    for port in "${ports[@]}"; do
      redis-cli -h 127.0.0.1 -p "$port" cluster info >&2 2>&1
    done
    _redis_log "the Redis Cluster did not become healthy"
    return 1
  fi
  local addrs
  addrs=$(IFS=,; echo "${nodes[*]}")
  export IDEMKIT_TEST_REDIS_CLUSTER_ADDRS="$addrs"
  _redis_log "Redis Cluster of three masters on $addrs"
}

stop_redis_servers() {
  local pid i
  for pid in "${_idemkit_redis_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${_idemkit_redis_pids[@]}"; do
    for i in $(seq 1 40); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  _idemkit_redis_pids=()
  if [ -n "$_idemkit_redis_dir" ]; then rm -rf "$_idemkit_redis_dir"; fi
  _idemkit_redis_dir=""
  unset IDEMKIT_TEST_REDIS_ADDR IDEMKIT_TEST_REDIS_CLUSTER_ADDRS
}

# start_redis_servers starts the single server and the cluster; on failure
# it stops whatever started.
start_redis_servers() {
  if ! start_redis || ! start_redis_cluster; then
    stop_redis_servers
    return 1
  fi
}
