# shellcheck shell=bash
# Database servers for the store tests: a bash library, sourced by
# scripts/test-all (or by hand) and never run on its own.
#
#   source scripts/servers.sh
#   start_servers || exit 1      # exports the DSNs below
#   trap stop_servers EXIT
#
# start_servers installs what is missing (as root, through apt-get), starts a
# throwaway PostgreSQL and MariaDB, each in a fresh temporary directory and
# listening only on 127.0.0.1 on a free port, creates a database in each and
# exports:
#   IDEMKIT_TEST_POSTGRES_DSN   postgres://postgres@127.0.0.1:PORT/idemkit_test?sslmode=disable
#   IDEMKIT_TEST_MYSQL_DSN      idemkit:idemkit@tcp(127.0.0.1:PORT)/idemkit_test
# If a server cannot start, it says what is missing and returns non-zero:
# nothing is ever skipped silently. stop_servers kills both servers and
# removes their directories; it is safe to call more than once.
#
# The servers are tuned for tests, not durability (no fsync).

IDEMKIT_PG_VERSION=${IDEMKIT_PG_VERSION:-15}
IDEMKIT_TEST_USER=${IDEMKIT_TEST_USER:-idemkit-test}

_idemkit_pg_dir=""
_idemkit_my_dir=""
_idemkit_my_pid=""

_servers_log() { echo "servers: $*" >&2; }

# _servers_free_port prints a TCP port that nothing listens on right now.
_servers_free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' && return
  fi
  local port tries
  for tries in $(seq 1 100); do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  _servers_log "no free port found after $tries tries"
  return 1
}

# _servers_apt_install installs Debian packages, as root only.
_servers_apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    _servers_log "missing: Debian package(s) $* (run as root, or install them: apt-get install $*)"
    return 1
  fi
  _servers_log "installing $* with apt-get"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; then
      _servers_log "apt-get install $* failed"
      return 1
    fi
  fi
}

# _servers_as_user runs a command as the unprivileged test user when root
# (PostgreSQL refuses to run as root), as the caller otherwise.
_servers_as_user() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$IDEMKIT_TEST_USER" -- "$@"
  else
    "$@"
  fi
}

# _servers_wait runs a probe command up to 120 times, 0.25 s apart.
_servers_wait() {
  local i
  for i in $(seq 1 120); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.25
  done
  return 1
}

start_postgres() {
  local bin=/usr/lib/postgresql/$IDEMKIT_PG_VERSION/bin
  if [ ! -x "$bin/postgres" ] || [ ! -x "$bin/initdb" ]; then
    _servers_apt_install "postgresql-$IDEMKIT_PG_VERSION" || {
      _servers_log "missing: PostgreSQL $IDEMKIT_PG_VERSION server binaries in $bin"
      return 1
    }
  fi
  if [ "$(id -u)" -eq 0 ] && ! id "$IDEMKIT_TEST_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$IDEMKIT_TEST_USER" || {
      _servers_log "cannot create user $IDEMKIT_TEST_USER to run PostgreSQL (it refuses root)"
      return 1
    }
  fi
  local dir port
  dir=$(mktemp -d /tmp/idemkit-pg.XXXXXX) || return 1
  _idemkit_pg_dir=$dir
  if [ "$(id -u)" -eq 0 ]; then
    chown "$IDEMKIT_TEST_USER" "$dir"
  fi
  port=$(_servers_free_port) || return 1
  if ! _servers_as_user "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    _servers_log "PostgreSQL initdb failed"
    return 1
  fi
  if ! _servers_as_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
    start >/dev/null; then
    cat "$dir/server.log" >&2
    _servers_log "PostgreSQL did not start"
    return 1
  fi
  if ! "$bin/psql" -q -X -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE idemkit_test" >/dev/null; then
    _servers_log "cannot create the PostgreSQL test database"
    return 1
  fi
  export IDEMKIT_TEST_POSTGRES_DSN="postgres://postgres@127.0.0.1:$port/idemkit_test?sslmode=disable"
  _servers_log "PostgreSQL $IDEMKIT_PG_VERSION on 127.0.0.1:$port"
}

stop_postgres() {
  local dir=$_idemkit_pg_dir
  [ -n "$dir" ] || return 0
  _idemkit_pg_dir=""
  if [ -f "$dir/data/postmaster.pid" ]; then
    _servers_as_user /usr/lib/postgresql/"$IDEMKIT_PG_VERSION"/bin/pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  unset IDEMKIT_TEST_POSTGRES_DSN
}

start_mysql() {
  if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    _servers_apt_install mariadb-server || {
      _servers_log "missing: mariadbd (Debian package mariadb-server)"
      return 1
    }
  fi
  local mariadbd installdb client
  mariadbd=$(command -v mariadbd || echo /usr/sbin/mariadbd)
  installdb=$(command -v mariadb-install-db || echo /usr/bin/mariadb-install-db)
  client=$(command -v mariadb || echo /usr/bin/mariadb)
  local tool
  for tool in "$installdb" "$client"; do
    if [ ! -x "$tool" ]; then
      _servers_log "missing: $tool (Debian package mariadb-server)"
      return 1
    fi
  done
  local dir port
  dir=$(mktemp -d /tmp/idemkit-my.XXXXXX) || return 1
  _idemkit_my_dir=$dir
  port=$(_servers_free_port) || return 1
  local user=()
  if [ "$(id -u)" -eq 0 ]; then
    user=(--user=root)
  fi
  if ! "$installdb" --no-defaults "${user[@]}" --datadir="$dir/data" --auth-root-authentication-method=normal \
    --skip-test-db >"$dir/install.log" 2>&1; then
    cat "$dir/install.log" >&2
    _servers_log "mariadb-install-db failed"
    return 1
  fi
  "$mariadbd" --no-defaults "${user[@]}" --datadir="$dir/data" --socket="$dir/sock" --port="$port" \
    --bind-address=127.0.0.1 --pid-file="$dir/pid" --log-error="$dir/error.log" --skip-name-resolve \
    --skip-log-bin --innodb-buffer-pool-size=128M --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
    --max-connections=300 --max-allowed-packet=64M >/dev/null 2>&1 &
  _idemkit_my_pid=$!
  if ! _servers_wait "$client" --no-defaults -S "$dir/sock" -u root -e "SELECT 1"; then
    cat "$dir/error.log" >&2
    _servers_log "MariaDB did not start"
    return 1
  fi
  if ! "$client" --no-defaults -S "$dir/sock" -u root -e "
      CREATE DATABASE idemkit_test;
      CREATE USER 'idemkit'@'127.0.0.1' IDENTIFIED BY 'idemkit';
      GRANT ALL ON idemkit_test.* TO 'idemkit'@'127.0.0.1';"; then
    _servers_log "cannot create the MariaDB test database"
    return 1
  fi
  export IDEMKIT_TEST_MYSQL_DSN="idemkit:idemkit@tcp(127.0.0.1:$port)/idemkit_test"
  _servers_log "MariaDB $("$mariadbd" --version | awk '{print $3}') on 127.0.0.1:$port"
}

stop_mysql() {
  local dir=$_idemkit_my_dir pid=$_idemkit_my_pid
  _idemkit_my_dir="" _idemkit_my_pid=""
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 40); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [ -n "$dir" ]; then rm -rf "$dir"; fi
  unset IDEMKIT_TEST_MYSQL_DSN
}

# start_servers starts both servers; on failure it stops whatever started.
start_servers() {
  if ! start_postgres || ! start_mysql; then
    stop_servers
    return 1
  fi
}

stop_servers() {
  stop_postgres
  stop_mysql
}
