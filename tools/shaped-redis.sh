#!/usr/bin/env bash
# A redis-server behind a link shaped by the kernel: a network namespace joined to
# this one by a veth pair, a token-bucket filter (tc tbf) on both ends, the server
# bound inside the namespace. `bench remote --remote-link direct` then reaches the
# store over that link instead of through its in-process throttling proxy.
#   tools/shaped-redis.sh start [RATE]   # prints redis://ADDR:PORT; RATE: tc's, e.g. 96mbit (12 MB/s)
#   tools/shaped-redis.sh stop
#   tools/shaped-redis.sh check          # exit 0 when this machine allows it (root, netns, veth, tbf)
# Environment: SHAPED_NAME (namespace and link names, default vcshaped), SHAPED_NET
# (a free /24's first three octets, default 10.213.7), SHAPED_PORT (default 6399).
# Needs root (CAP_NET_ADMIN) and the kernel's veth and sch_tbf; where either is
# missing, `start` says which and exits 1, and the proxy is what is left.
set -euo pipefail
action=${1:-}
rate=${2:-96mbit}
name=${SHAPED_NAME:-vcshaped}
net=${SHAPED_NET:-10.213.7}
port=${SHAPED_PORT:-6399}
host_if=${name}h  # this namespace's end
ns_if=${name}n    # the store's end
run_dir=${TMPDIR:-/tmp}/$name
die() { echo "shaped-redis: $*" >&2; exit 1; }
trap 'echo "shaped-redis: failed: $BASH_COMMAND (line $LINENO)" >&2; teardown; exit 1' ERR

teardown() {
  if [ -f "$run_dir/redis.pid" ]; then
    kill "$(cat "$run_dir/redis.pid")" 2>/dev/null || true
  fi
  ip netns del "$name" 2>/dev/null || true  # removes its veth end, and so the pair
  ip link del "$host_if" 2>/dev/null || true
  rm -rf "$run_dir"
}

case $action in
  check | start)
    [ "$(id -u)" -eq 0 ] || die "needs root (CAP_NET_ADMIN) for a network namespace and tc"
    command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (iproute2)"
    command -v redis-server >/dev/null || die "needs redis-server (tools/setup.sh installs it)"
    teardown
    ip netns add "$name" 2>/dev/null || die "cannot create network namespace '$name' (ip netns add)"
    if ! ip link add "$host_if" type veth peer name "$ns_if" 2>/dev/null; then
      teardown; die "cannot create a veth pair (no veth in this kernel?)"
    fi
    ip link set "$ns_if" netns "$name"
    ip addr add "$net.1/24" dev "$host_if"
    ip link set "$host_if" up
    ip netns exec "$name" ip addr add "$net.2/24" dev "$ns_if"
    ip netns exec "$name" ip link set "$ns_if" up
    ip netns exec "$name" ip link set lo up
    for side in "" "ip netns exec $name"; do
      dev=$host_if
      [ -n "$side" ] && dev=$ns_if
      # shellcheck disable=SC2086
      if ! $side tc qdisc add dev "$dev" root tbf rate "$rate" burst 64kb latency 400ms 2>/dev/null; then
        teardown; die "tc cannot shape '$dev' at '$rate' (no sch_tbf in this kernel, or a bad rate)"
      fi
    done
    if [ "$action" = check ]; then teardown; exit 0; fi
    mkdir -p "$run_dir"
    # Protected mode off: the address is the veth pair's, reachable from this host only.
    ip netns exec "$name" redis-server --bind "$net.2" --port "$port" --save '' --appendonly no \
      --protected-mode no \
      --daemonize yes --pidfile "$run_dir/redis.pid" --logfile "$run_dir/redis.log" --dir "$run_dir" \
      >/dev/null || { teardown; die "redis-server did not start (see $run_dir/redis.log)"; }
    for _ in $(seq 50); do
      [ -s "$run_dir/redis.pid" ] && ip netns exec "$name" redis-cli -h "$net.2" -p "$port" ping \
        >/dev/null 2>&1 && break
      sleep 0.1
    done
    echo "redis://$net.2:$port"
    ;;
  stop) teardown ;;
  *) echo "usage: tools/shaped-redis.sh start [RATE] | stop | check" >&2; exit 2 ;;
esac
