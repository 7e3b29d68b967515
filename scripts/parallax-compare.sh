#!/usr/bin/env bash
# Parallax's own benchmark (YCSB-CXX `ycsb-edb`) and `halyard bench` on the same workload,
# run alternately and measured the same way; prints the medians and Halyard / Parallax.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: scripts/parallax-compare.sh PARALLAX_BUILD_DIR

Runs Parallax's YCSB-CXX (ycsb-edb) and `halyard bench` alternately, RUNS times each, on
YCSB-CXX's workload: decimal FNV-64 keys, values cycling per thread through 5 B x6,
100 B x2, 2000 B x2 (sd; md and ld reorder the sizes), load_a (inserts), run_a (50% reads,
50% updates that read first, uniform), run_c (reads, Zipfian 0.99), the store closed and
reopened between phases, and a final check of the keys after a last reopen.

Both sides are measured the same way, per phase:
  - ops/s over the operation loop and over open..close;
  - CPU (user + sys) per operation over open..close, from /proc/PID/stat;
  - device bytes read and written over open..close (/proc/PID/io, writes net of
    cancelled), per user byte (the key and value bytes the phase wrote or read back,
    identical on both sides since the workload is);
  - keys missing after the final reopen: Halyard reads every key back (its `verify`
    phase); Parallax reads 2 x RECORDS uniform keys (86% of them) and counts its
    "cannot find" lines, and a lost key read by an update makes it exit.
The medians of the RUNS runs are printed with the ratios; every run's raw figures stay in
WORK.

Environment (defaults):
  RECORDS=3000000  OPS=RECORDS  RUNS=3  THREADS=4  MIX=sd (or md, ld)
  HALYARD=target/release/halyard  CACHE_MB=8192 (Halyard's cache; Parallax uses the page
  cache)  SYNC=group (Halyard's durability: none, group, always)  L0_MB=64  GROWTH=4
  WORK=/tmp/parallax-compare (needs VOLUME_GB + a few GB free)  VOLUME_GB=16

Building Parallax (commit d4aae58; CI does not run this script):
  git clone https://github.com/CARV-ICS-FORTH/parallax && cd parallax && git checkout d4aae58
  sed -i 's/ -pg//g' CMakeLists.txt       # gprof instrumentation costs it ~40% of its load
  sed -i 's/^level0_size:.*/level0_size: 64/' options.yml   # the shipped 1 MB loses keys
  apt-get install -y cmake libnuma-dev libboost-dev
  mkdir build && cd build && cmake -DCMAKE_BUILD_TYPE=Release .. && make ycsb-edb kv_format.parallax
  (offline: -DFETCHCONTENT_FULLY_DISCONNECTED=ON and -DFETCHCONTENT_SOURCE_DIR_<NAME>=DIR for
  LOG, YAML, UTHASH, CMAKE-SCRIPTS, LIBBLOOM and MINOS.) PARALLAX_BUILD_DIR is that build
  directory. Its options.yml is read from the source tree at the path compiled in; the
  script checks level0_size and growth_factor there.
EOF
}

[[ $# -eq 1 && $1 != -h && $1 != --help ]] || { usage; [[ $# -eq 1 ]] && exit 0; exit 2; }
PB=$(cd "$1" && pwd)
YCSB=$PB/YCSB-CXX/ycsb-edb
FORMAT=$PB/lib/kv_format.parallax
for b in "$YCSB" "$FORMAT"; do
    [[ -x $b ]] || { echo "no $b: build ycsb-edb and kv_format.parallax in $PB (see --help)" >&2; exit 2; }
done
RECORDS=${RECORDS:-3000000}
OPS=${OPS:-$RECORDS}
RUNS=${RUNS:-3}
THREADS=${THREADS:-4}
MIX=${MIX:-sd}
HALYARD=$(realpath "${HALYARD:-target/release/halyard}")
CACHE_MB=${CACHE_MB:-8192}
SYNC=${SYNC:-group}
L0_MB=${L0_MB:-64}
GROWTH=${GROWTH:-4}
WORK=${WORK:-/tmp/parallax-compare}
VOLUME_GB=${VOLUME_GB:-16}
[[ -x $HALYARD ]] || { echo "no $HALYARD: cargo build --release -p halyard (or set HALYARD)" >&2; exit 2; }
case $MIX in sd | md | ld) ;; *) echo "MIX=$MIX: expected sd, md or ld" >&2; exit 2 ;; esac

check_options() {
    local yml
    yml=$(strings -a "$YCSB" "$PB"/lib/*.so* 2>/dev/null | grep -m1 '/options.yml$' || true)
    [[ -n $yml && -f $yml ]] || { echo "warning: cannot find Parallax's options.yml; make sure level0_size is 64" >&2; return; }
    grep -q '^level0_size: *64 *$' "$yml" || { echo "$yml: set level0_size: 64 (the shipped 1 loses keys)" >&2; exit 2; }
    grep -q "^growth_factor: *$GROWTH *\$" "$yml" || { echo "$yml: growth_factor must be $GROWTH (GROWTH)" >&2; exit 2; }
    echo "Parallax options: $yml (level0_size 64, growth_factor $GROWTH)"
}

# ycsb-edb calls ./start_statistics.sh and ./stop_statistics.sh DIR around each phase's
# open..close; these record the wall time, CPU ticks and I/O of the ycsb-edb process.
write_probes() {
    local f
    for f in start stop; do
        cat > "$1/${f}_statistics.sh" <<EOF
#!/usr/bin/env bash
p=\$PPID
while [[ \$(cat /proc/\$p/comm) != ycsb-edb ]]; do p=\$(awk '{print \$4}' /proc/\$p/stat); done
io() { awk -v k="\$1:" '\$1 == k {print \$2}' /proc/\$p/io; }
echo "\$(date +%s.%N) \$(awk '{print \$14 + \$15}' /proc/\$p/stat) \$(io read_bytes) \$(io write_bytes) \$(io cancelled_write_bytes)" > "\$1/$f"
EOF
        chmod +x "$1/${f}_statistics.sh"
    done
}

write_workloads() {
    local d=$1
    cat > "$d/workloada" <<EOF
recordcount=$RECORDS
operationcount=$OPS
readallfields=true
readproportion=0.5
updateproportion=0.5
scanproportion=0
insertproportion=0
maxexecutiontime=1000000
fieldcount=10
insertorder=hashed
status.interval=1
EOF
    sed -e 's/^readproportion=.*/readproportion=1/' -e 's/^updateproportion=.*/updateproportion=0/' \
        "$d/workloada" > "$d/workloadc"
    echo "requestdistribution=zipfian" >> "$d/workloadc"
    sed -e "s/^operationcount=.*/operationcount=$((2 * RECORDS))/" "$d/workloadc" |
        sed -e 's/^requestdistribution=.*/requestdistribution=uniform/' > "$d/check"
    printf 'load_a load workloada\nrun_a run workloada\nrun_c run workloadc\ncheck run check\n' > "$d/plan"
}

run_parallax() {
    local d=$WORK/parallax-$1
    rm -rf "$d" && mkdir -p "$d/volume" "$d/out"
    write_probes "$d"
    write_workloads "$d"
    fallocate -l "${VOLUME_GB}G" "$d/volume/vol.dat"
    "$FORMAT" --device "$d/volume/vol.dat" --max_regions_num 128 > "$d/format.log" 2>&1
    # Line-buffered so that each line is stamped when it is printed.
    (cd "$d" && stdbuf -oL -eL "$YCSB" -threads "$THREADS" -dbnum 1 -wl "$MIX" -e plan \
        -p "$d/volume/vol.dat" -o "$d/out" -stats on 2>&1) |
        while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done > "$d/log"
    rm -f "$d/volume/vol.dat"
}

run_halyard() {
    local d=$WORK/halyard-$1
    rm -rf "$d" && mkdir -p "$d"
    "$HALYARD" bench --engines halyard --dir "$d/data" --json "$d/report.json" --quiet \
        --records "$RECORDS" --ops "$OPS" --threads "$THREADS" --mix "ycsb-cxx-$MIX" --keys fnv \
        --dist zipfian,run-a=uniform --update-rmw --reopen-between-phases \
        --workloads load-a,run-a,run-c,verify --l0-mb "$L0_MB" --growth-factor "$GROWTH" \
        --cache-mb "$CACHE_MB" --sync "$SYNC" > "$d/table.txt"
}

check_options
mkdir -p "$WORK"
for i in $(seq 1 "$RUNS"); do
    echo "run $i of $RUNS: parallax" >&2
    run_parallax "$i"
    echo "run $i of $RUNS: halyard" >&2
    run_halyard "$i"
done
python3 "$(dirname "$0")/parallax-compare-table.py" "$WORK" "$RUNS" "$(getconf CLK_TCK)"
