#!/usr/bin/env python3
"""The table of scripts/parallax-compare.sh: medians of each side's runs, per phase, and the
ratios Halyard / Parallax. Arguments: WORK RUNS CLK_TCK. Writes WORK/summary.json too."""

import json
import re
import statistics
import sys

WORK, RUNS, TCK = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
PHASES = [("load_a", "load-a"), ("run_a", "run-a"), ("run_c", "run-c"), ("check", "verify")]


def probe(path):
    t, cpu, rd, wr, cancelled = open(path).read().split()
    return float(t), float(cpu) / TCK, int(rd), int(wr) - int(cancelled)


def parallax_run(i):
    """Per phase: ops, loop seconds, open..close seconds, CPU seconds, bytes read, written, misses."""
    d = f"{WORK}/parallax-{i}"
    phases, cur = {}, None
    for line in open(f"{d}/log", errors="replace"):
        ts, _, text = line.rstrip("\n").partition(" ")
        m = re.match(r"\*\*\*\* Executing (\S+) \*\*\*\*", text)
        if m:
            cur = phases.setdefault(m.group(1), {"misses": 0})
        elif cur is None:
            continue
        elif text.startswith("Init DB takes"):
            cur["loop_start"] = float(ts)
        elif text.startswith("Waiting for reporter thread"):
            cur["loop_end"] = float(ts)
        elif text.startswith("Executed "):
            cur["ops"] = int(text.split()[1])
        elif text.startswith("Close DB takes"):
            cur["closed"] = float(ts)
        elif "cannot find" in text:
            cur["misses"] += 1
    out = {}
    for name, p in phases.items():
        t0, c0, r0, w0 = probe(f"{d}/out/{name}/start")
        _, c1, r1, w1 = probe(f"{d}/out/{name}/stop")
        out[name] = {
            "ops": p["ops"],
            "loop_s": p["loop_end"] - p["loop_start"],
            "oc_s": p["closed"] - t0,
            "cpu_s": c1 - c0,
            "read": r1 - r0,
            "write": w1 - w0,
            "misses": p["misses"],
        }
    return out


def halyard_run(i):
    doc = json.load(open(f"{WORK}/halyard-{i}/report.json"))
    out = {}
    for r in doc["results"]:
        x = r["reopen"]
        out[r["workload"]] = {
            "ops": r["ops"],
            "loop_s": r["seconds"],
            "oc_s": x["open_seconds"] + r["seconds"] + x["close_seconds"],
            "cpu_s": r["cpu_us_per_op"] * r["ops"] / 1e6 + x["cpu_seconds"],
            "read": r["device_read_bytes"] + x["open_read_bytes"] + x["close_read_bytes"],
            "write": r["device_write_bytes"] + x["open_write_bytes"] + x["close_write_bytes"],
            "misses": r["misses"],
            "user": r["user_bytes"],
            "space": r["space_amplification"],
        }
    return out


def figures(p, user):
    return {
        "ops_s": p["ops"] / p["loop_s"],
        "ops_s_open_close": p["ops"] / p["oc_s"],
        "cpu_us_op": p["cpu_s"] * 1e6 / p["ops"],
        "read_per_user_byte": p["read"] / user,
        "write_per_user_byte": p["write"] / user,
        "misses": p["misses"],
    }


def main():
    par = [parallax_run(i) for i in range(1, RUNS + 1)]
    hal = [halyard_run(i) for i in range(1, RUNS + 1)]
    summary = {}
    for pname, hname in PHASES:
        users = [h[hname]["user"] for h in hal]
        pf = [figures(p[pname], u) for p, u in zip(par, users)]
        hf = [figures(h[hname], u) for h, u in zip(hal, users)]
        med = lambda rows, k: statistics.median(r[k] for r in rows)
        summary[pname] = {
            "parallax": {k: med(pf, k) for k in pf[0]},
            "halyard": {k: med(hf, k) for k in hf[0]},
            "halyard_space_amplification": statistics.median(h[hname]["space"] for h in hal),
            "parallax_runs": pf,
            "halyard_runs": hf,
        }
    json.dump(summary, open(f"{WORK}/summary.json", "w"), indent=1)
    print(f"\nMedians of {RUNS} alternating runs; ratios are Halyard / Parallax.")
    print(f"{'phase':8} {'side':9} {'ops/s':>9} {'o..c ops/s':>11} {'cpu us/op':>10} {'rd/user':>8} {'wr/user':>8} {'missing':>8}")
    for pname, _ in PHASES:
        s = summary[pname]
        for side in ("parallax", "halyard"):
            f = s[side]
            print(f"{pname:8} {side:9} {f['ops_s']:9.0f} {f['ops_s_open_close']:11.0f} {f['cpu_us_op']:10.2f} "
                  f"{f['read_per_user_byte']:8.2f} {f['write_per_user_byte']:8.2f} {f['misses']:8.0f}")
        p, h = s["parallax"], s["halyard"]
        r = lambda k: h[k] / p[k] if p[k] else float("nan")
        print(f"{pname:8} {'ratio':9} {r('ops_s'):8.2f}x {r('ops_s_open_close'):10.2f}x {r('cpu_us_op'):9.2f}x "
              f"{r('read_per_user_byte'):7.2f}x {r('write_per_user_byte'):7.2f}x   (Halyard space amp {s['halyard_space_amplification']:.2f})")
    print("\ncheck: Halyard reads every key back; Parallax reads 2 x records uniform keys. "
          f"Raw figures per run: {WORK}/summary.json")


main()
