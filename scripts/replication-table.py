#!/usr/bin/env python3
"""Medians of per-run ratios from `halyard bench --cluster ... --json repN.json` runs.

Usage: scripts/replication-table.py rep1.json rep2.json rep3.json
Prints the markdown table of docs/performance.md (replication section): per mix and phase,
median ops/s per mode, and medians of the per-run ratios Send-Index/Build-Index (throughput,
backup CPU per op, network amplification) and Send-Index/none (throughput), with the spread.
"""
import json
import statistics
import sys

SI, BI, NONE = "cluster-send-index", "cluster-build-index", "cluster-none"


def load(path):
    d = json.load(open(path))
    return {(r["engine"], r["mix"], r["workload"]): r for r in d["results"]}


def main(paths):
    runs = [load(p) for p in paths]
    keys = sorted({(m, w) for run in runs for (_, m, w) in run}, key=lambda k: ("SD MD LD".split().index(k[0]) if k[0] in "SD MD LD".split() else 9, k[1]))
    print("| mix | phase | ops/s SI / BI / none | SI/BI ops (≥1.2) | backup CPU/op µs SI vs BI | ratio (≤0.33) "
          "| backup reads MB SI vs BI | ratio (≤0.05) | network amp SI vs BI | ratio (≤1.5) | index images packed | SI/none (≥0.6) |")
    print("|" + "---|" * 12)
    for mix, wl in keys:
        rows = [(run.get((SI, mix, wl)), run.get((BI, mix, wl)), run.get((NONE, mix, wl))) for run in runs]
        rows = [r for r in rows if r[0] and r[1]]
        if not rows:
            continue
        med = lambda xs: statistics.median(xs) if xs else float("nan")
        rng = lambda xs: f"{min(xs):.2f}–{max(xs):.2f}" if xs else "–"
        ops = lambda i: med([r[i]["ops_per_sec"] for r in rows if r[i]])
        role = lambda r, k: (r.get("roles") or {}).get(k)
        thr = [r[0]["ops_per_sec"] / r[1]["ops_per_sec"] for r in rows]
        cpu = [role(r[0], "backup_cpu_us_per_op") / role(r[1], "backup_cpu_us_per_op") for r in rows]
        rd_si = med([role(r[0], "backup_device_read_bytes") / 1e6 for r in rows])
        rd_bi = med([role(r[1], "backup_device_read_bytes") / 1e6 for r in rows])
        rd = [role(r[0], "backup_device_read_bytes") / max(1, role(r[1], "backup_device_read_bytes")) for r in rows]
        net = [role(r[0], "network_amplification") / role(r[1], "network_amplification") for r in rows]
        packed = []
        for r in rows:
            img, repl_si, repl_bi = role(r[0], "index_image_bytes"), role(r[0], "replication_bytes"), role(r[1], "replication_bytes")
            if img:
                packed.append((repl_si - repl_bi) / img)
        none = [r[0]["ops_per_sec"] / r[2]["ops_per_sec"] for r in rows if r[2]]
        mark = lambda v, ok: f"**{v:.2f}**" if ok else f"{v:.2f} ✗"
        # Below 1 MB both modes read only their manifests at start: no data reads to compare.
        reads = lambda rd, si, bi: "**none**" if bi < 1 and si <= bi else mark(med(rd), med(rd) <= 0.05)
        print(f"| {mix} | {wl} | {ops(0):,.0f} / {ops(1):,.0f} / {ops(2):,.0f} "
              f"| {mark(med(thr), med(thr) >= 1.2)} ({rng(thr)}) "
              f"| {med([role(r[0], 'backup_cpu_us_per_op') for r in rows]):.1f} vs {med([role(r[1], 'backup_cpu_us_per_op') for r in rows]):.1f} "
              f"| {mark(med(cpu), med(cpu) <= 1 / 3)} ({rng(cpu)}) "
              f"| {rd_si:,.0f} vs {rd_bi:,.0f} | {reads(rd, rd_si, rd_bi)} "
              f"| {med([role(r[0], 'network_amplification') for r in rows]):.1f} vs {med([role(r[1], 'network_amplification') for r in rows]):.1f} "
              f"| {mark(med(net), med(net) <= 1.5)} ({rng(net)}) "
              f"| {med(packed):.2f} "
              f"| {mark(med(none), med(none) >= 0.6) if none else '–'} ({rng(none)}) |")
    # Where the machine's CPU goes per op: every process shares the same cores, so ops/s is
    # about the cores kept busy over the CPU all processes spend per op.
    print()
    print("| mix | phase | CPU µs/op primary + backups + client, SI | BI | none | cores busy SI / BI / none |")
    print("|" + "---|" * 6)
    for mix, wl in keys:
        rows = [(run.get((SI, mix, wl)), run.get((BI, mix, wl)), run.get((NONE, mix, wl))) for run in runs]
        cells, cores = [], []
        for i in range(3):
            rs = [r[i] for r in rows if r[i]]
            if not rs:
                cells.append("–")
                cores.append("–")
                continue
            med = statistics.median
            prim = med([r["cpu_us_per_op"] for r in rs])
            back = med([(r.get("roles") or {}).get("backup_cpu_us_per_op") or 0 for r in rs])
            cli = med([r.get("client_cpu_us_per_op") or 0 for r in rs])
            cells.append(f"{prim:.0f} + {back:.0f} + {cli:.0f} = **{prim + back + cli:.0f}**")
            busy = med([(r["cpu_us_per_op"] + ((r.get("roles") or {}).get("backup_cpu_us_per_op") or 0)
                         + (r.get("client_cpu_us_per_op") or 0)) * r["ops_per_sec"] / 1e6 for r in rs])
            cores.append(f"{busy:.2f}")
        print(f"| {mix} | {wl} | {' | '.join(cells)} | {' / '.join(cores)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
