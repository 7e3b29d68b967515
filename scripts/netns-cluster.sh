# Sourced by the benchmarks whose nodes live in network namespaces (scaleout-bench.sh,
# skew-bench.sh): five namespaces hy1..hy5 joined to this host by veth pairs, each link limited
# by `tbf` to $rate Mbit/s each way, so that on a machine of two cores a curve shows what adding
# machines does, not how the processes share the cores; an etcd on the host. Node i listens on
# 10.77.i.2 (native 7400, Redis 6400, HTTP 9400, replication 7500).
# Needs $B (the halyard binary) and $rate; runs in a temporary directory removed on exit (the
# nodes' logs and run-*.txt are copied to $TMPDIR first). Needs root; uses 10.77.1.0/24 ..
# 10.77.5.0/24 and port 24794.
root=$(mktemp -d); cd "$root"
E=http://10.77.1.1:24794
netns_down() {
  # SIGKILL: with etcd going away too, a graceful leave would wait for handoffs that cannot happen.
  pkill -9 -f "serve --dir s[0-9] --etcd http://10.77" 2>/dev/null || true
  kill "${ETCD:-}" 2>/dev/null || true
  for i in 1 2 3 4 5; do ip netns del hy$i 2>/dev/null || true; ip link del hyv$i 2>/dev/null || true; done
  iptables -D FORWARD -s 10.77.0.0/16 -d 10.77.0.0/16 -j ACCEPT 2>/dev/null || true
}
cleanup() {
  netns_down
  cp s*.log run-*.txt "${TMPDIR:-/tmp}/" 2>/dev/null || true
  cd /; rm -rf "$root"
}
trap cleanup EXIT
# netns_up: the namespaces, links and etcd (a fresh data directory each time).
netns_up() {
  sysctl -qw net.ipv4.ip_forward=1
  iptables -I FORWARD -s 10.77.0.0/16 -d 10.77.0.0/16 -j ACCEPT
  for i in 1 2 3 4 5; do
    ip netns add hy$i
    ip link add hyv$i type veth peer name eth0 netns hy$i
    ip addr add 10.77.$i.1/24 dev hyv$i; ip link set hyv$i up
    ip -n hy$i addr add 10.77.$i.2/24 dev eth0
    ip -n hy$i link set eth0 up; ip -n hy$i link set lo up
    ip -n hy$i route add default via 10.77.$i.1
    tc qdisc add dev hyv$i root tbf rate ${rate}mbit burst 64kb latency 100ms
    ip netns exec hy$i tc qdisc add dev eth0 root tbf rate ${rate}mbit burst 64kb latency 100ms
  done
  rm -rf etcd s[0-9]
  etcd --logger zap --log-level error --data-dir etcd --listen-client-urls http://0.0.0.0:24794 \
    --advertise-client-urls $E --listen-peer-urls http://127.0.0.1:24804 \
    --initial-advertise-peer-urls http://127.0.0.1:24804 --initial-cluster default=http://127.0.0.1:24804 \
    --experimental-enable-lease-checkpoint >/dev/null 2>&1 &
  ETCD=$!
  sleep 1.5
}
# start I [FLAGS...]: node nI in namespace hyI, with extra `halyard serve` flags.
start() {
  local i=$1 a=10.77.$1.2; shift
  # In a subshell: not a job of this shell, which would report its SIGKILL at the end.
  ( RUST_LOG=${HALYARD_LOG:-warn} ip netns exec hy$i ${HALYARD_SERVE_BIN:-$B} serve --dir s$i --etcd http://10.77.$i.1:24794 \
    --node n$i --listen $a:7400 --resp $a:6400 --http $a:9400 --replication-listen $a:7500 --cache-mb 128 \
    --requirepass scaleout --cluster-secret scaleout-secret "$@" > s$i.log 2>&1 & )
}
# ops_of FILE WORKLOAD: the ops/s `halyard bench --json` reported for WORKLOAD.
# unknown_of JSON: writes of unknown outcome (OutcomeUnknown) the bench counted over its phases.
unknown_of() { python3 -c "
import json
def walk(x):
    if isinstance(x, dict):
        return x.get('engine_counters', {}).get('outcome_unknown_writes', 0) + sum(walk(v) for k, v in x.items() if k != 'engine_counters')
    if isinstance(x, list):
        return sum(walk(v) for v in x)
    return 0
print(walk(json.load(open('$1'))))" 2>/dev/null || echo 0; }
ops_of() { python3 -c "
import json
def walk(x):
    if isinstance(x, dict):
        if x.get('workload') == '$2' and 'ops_per_sec' in x: print(round(x['ops_per_sec'])); raise SystemExit
        for v in x.values(): walk(v)
    elif isinstance(x, list):
        for v in x: walk(v)
walk(json.load(open('$1')))"; }
