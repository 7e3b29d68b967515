# Sourced by the benchmark scripts: `start_etcd CLIENT_PORT PEER_PORT` starts a single-member
# etcd with lease checkpointing in ./etcd (the current directory), sets ETCD (its pid) and E
# (its client URL), and waits for it to come up.
start_etcd() {
  E=http://127.0.0.1:$1
  local peer=http://127.0.0.1:$2
  etcd --logger zap --log-level error --data-dir etcd --listen-client-urls "$E" --advertise-client-urls "$E" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "default=$peer" \
    --experimental-enable-lease-checkpoint >/dev/null 2>&1 &
  ETCD=$!
  sleep 1.5
}
