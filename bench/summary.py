#!/usr/bin/env python3
"""Summarises a bench/figures.sh directory as the markdown tables of docs/PERFORMANCE.md.

    python3 bench/summary.py DIR

Every cell is the median across rounds. A ratio is ours / the peer's busbw taken in the same
process, at the same size, interleaved (--peer), then the median of those per-run ratios; it is
not the ratio of two medians. The targets section checks each of docs/PERFORMANCE.md's targets
against these medians and says by how much a missed one is missed.
"""
import csv
import glob
import json
import os
import re
import statistics
import sys

if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
    sys.exit("usage: summary.py DIR (the -o directory of bench/figures.sh)")
root = sys.argv[1]


def med(values):
    return statistics.median(values) if values else None


def size_label(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def fmt(v, digits=3):
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


# name -> size -> field -> [values across rounds]
sweeps, profiles = {}, {}
for path in sorted(glob.glob(os.path.join(root, "*_[0-9]*.csv"))):  # one file per round
    name = re.sub(r"_\d+$", "", os.path.basename(path)[:-4])
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if "mode" in row:
                cell = profiles.setdefault(name, {}).setdefault(row["mode"], [])
                cell.append(float(row["time_us"]))
                continue
            cell = sweeps.setdefault(name, {}).setdefault(int(row["size"]), {})
            for field in ("oop_busbw_GBps", "ip_busbw_GBps", "ip_time_us", "peer_busbw_GBps",
                          "peer_time_us", "ratio"):
                if row.get(field) not in (None, "", "N/A"):
                    cell.setdefault(field, []).append(float(row[field]))

def iperf_runs(mode, key):
    values = []
    for path in sorted(glob.glob(os.path.join(root, f"iperf3_{mode}_*.json"))):
        with open(path) as f:
            end = json.load(f)["end"]
        values.append(sum(end[k]["bits_per_second"] for k in key) / 8e9)
    return values


oneway = iperf_runs("oneway", ["sum_received"])
# --bidir: both directions at once, as an allreduce's traffic is; per direction = total / 2.
bidir = [v / 2 for v in iperf_runs("bidir", ["sum_received", "sum_received_bidir_reverse"])]
tcp_limit, tcp_bidir = med(oneway), med(bidir)

print("## Limits\n")
if tcp_limit is not None:
    print(f"TCP loopback, `iperf3 -c 127.0.0.1 -t 5`, one stream one way, median of {len(oneway)}: "
          f"**{tcp_limit:.2f} GB/s** ({', '.join(f'{v:.2f}' for v in oneway)}).\n")
if tcp_bidir is not None:
    print(f"Both ways at once (`--bidir`), per direction, median of {len(bidir)}: "
          f"**{tcp_bidir:.2f} GB/s** ({', '.join(f'{v:.2f}' for v in bidir)}).\n")
kernels = os.path.join(root, "kernels.txt")
if os.path.exists(kernels):
    with open(kernels) as f:
        lines = [l.strip() for l in f if re.match(r"combine f32 sum( out of place)?: ", l)]
    if lines:
        print("Memory bandwidth, `distcomm-bench-kernels` (64 MiB arrays, one core, bytes counted "
              "3N: two reads and a write):\n")
        for l in lines:
            print(f"- {l}")
        print()


def sweep_table(prefix, value, title, unit):
    names = [n for n in sweeps if n.startswith(prefix)]
    if not names:
        return
    sizes = sorted({s for n in names for s in sweeps[n]})
    peers = {}
    for n in names:
        peer = "MPI_Allreduce" if peer_of(n) == "MPI" else "gloo::allreduce"
        if "local" in n:
            continue
        for s, cell in sweeps[n].items():
            if "peer_" + value.split("_", 1)[1] in cell:
                peers.setdefault(peer, {}).setdefault(s, []).extend(cell["peer_" + value.split("_", 1)[1]])
    cols = [n[len(prefix):] for n in names] + [f"{p} (peer)" for p in peers]
    print(f"### {title} ({unit}, medians)\n")
    print("| size | " + " | ".join(cols) + " |")
    print("|---:|" + "---:|" * len(cols))
    for s in sizes:
        cells = [fmt(med(sweeps[n].get(s, {}).get(value, []))) for n in names]
        cells += [fmt(med(peers[p].get(s, []))) for p in peers]
        print(f"| {size_label(s)} | " + " | ".join(cells) + " |")
    print()
    ratio_names = [n for n in names if any("ratio" in c for c in sweeps[n].values())]
    if ratio_names:
        print(f"### {title}: ours / the peer in the same run (peer time / our in-place time, "
              "median of per-run ratios; > 1 is faster)\n")
        print("| size | " + " | ".join(f"{n[len(prefix):]} / {peer_of(n)}" for n in ratio_names)
              + " |")
        print("|---:|" + "---:|" * len(ratio_names))
        for s in sizes:
            print(f"| {size_label(s)} | " +
                  " | ".join(f"{fmt(med(sweeps[n].get(s, {}).get('ratio', [])))}"
                             for n in ratio_names) + " |")
        print()


def peer_of(name):
    # figures.sh runs shm and ucx under mpirun with --peer mpi
    return "MPI" if any(k in name for k in ("mpi", "ucx", "shm")) else "gloo"


print("## Allreduce, 2 processes, f32 sum\n")
sweep_table("bw_", "ip_busbw_GBps", "Bus bandwidth, in place", "GB/s")
sweep_table("lat_", "ip_time_us", "Latency, in place", "µs")

if profiles:
    print("## ResNet-50 gradient profile, 2 processes (µs per step, medians)\n")
    print("| backend, strategy | fused | unfused | flat | peer flat | fused / flat | "
          "unfused / fused |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, modes in profiles.items():
        m = {k: med(v) for k, v in modes.items()}
        peer_mode = next((k for k in m if k.startswith("peer")), None)
        fused, unfused, flat = m.get("fused"), m.get("unfused"), m.get("flat")
        print(f"| {name[len('prof_'):]} | {fmt(fused)} | {fmt(unfused)} | {fmt(flat)} | "
              f"{fmt(m.get(peer_mode)) if peer_mode else '–'} | "
              f"{fused / flat:.2f} | {unfused / fused:.2f} |")
    print()

# ---- targets ----------------------------------------------------------------------------------
print("## Targets\n")


def best_at(sizes_pred, names, value="ip_busbw_GBps", higher=True):
    """Best configuration per size among `names`, as {size: (value, name)}."""
    best = {}
    for n in names:
        for s, cell in sweeps.get(n, {}).items():
            if not sizes_pred(s) or value not in cell:
                continue
            v = med(cell[value])
            if s not in best or (v > best[s][0] if higher else v < best[s][0]):
                best[s] = (v, n)
    return best


def mpi_peer(s, value):
    vals = [v for n in sweeps if peer_of(n) == "MPI" and "local" not in n
            for v in sweeps[n].get(s, {}).get(value, [])]
    return med(vals)


def verdict(ok):
    return "met" if ok else "**missed**"


process = [n for n in sweeps if n.startswith("bw_") and "local" not in n]
lines = []
best = best_at(lambda s: s >= 32 << 20, process)
for s, (v, n) in sorted(best.items()):
    ref = mpi_peer(s, "peer_busbw_GBps")
    if ref:
        lines.append(f"- ≥ 32 MiB, best ≥ 1.5× MPI_Allreduce: {size_label(s)}: {n[3:]} "
                     f"{v:.2f} GB/s = {v / ref:.2f}× MPI's {ref:.2f} GB/s: {verdict(v / ref >= 1.5)}")
for n in ("bw_gloo_native", "bw_gloo_ring"):
    for s, cell in sorted(sweeps.get(n, {}).items()):
        if s >= 32 << 20 and "ratio" in cell:
            r = med(cell["ratio"])
            lines.append(f"- ≥ 32 MiB, gloo backend ≥ 1.0× raw gloo: {size_label(s)} {n[3:]}: "
                         f"{r:.2f}×: {verdict(r >= 1.0)}")
if tcp_limit:
    for n in ("bw_gloo_native", "bw_gloo_ring", "bw_ucx_ring"):
        cells = sweeps.get(n, {})
        if cells:
            s, v = max(((s, med(c["ip_busbw_GBps"])) for s, c in cells.items()),
                       key=lambda x: x[1])
            both = (f"; {100 * v / tcp_bidir:.0f}% of iperf3 --bidir per direction "
                    f"({tcp_bidir:.2f} GB/s): {verdict(v >= 0.8 * tcp_bidir)}") if tcp_bidir else ""
            lines.append(f"- TCP path ≥ 80% of iperf3: {n[3:]} peaks at {v:.2f} GB/s "
                         f"({size_label(s)}) = {100 * v / tcp_limit:.0f}% of one way "
                         f"({tcp_limit:.2f} GB/s): {verdict(v >= 0.8 * tcp_limit)}{both}")
lat = [n for n in sweeps if n.startswith("lat_")]
best = best_at(lambda s: s <= 4096, lat, "ip_time_us", higher=False)
for s, (v, n) in sorted(best.items()):
    ref = mpi_peer(s, "peer_time_us")
    if ref:
        lines.append(f"- {size_label(s)}, best latency ≤ 2× MPI_Allreduce: {n[4:]} {v:.2f} µs = "
                     f"{v / ref:.2f}× MPI's {ref:.2f} µs: {verdict(v <= 2 * ref)}")
for n in ("lat_gloo_native", "lat_gloo_ring"):
    for s, cell in sorted(sweeps.get(n, {}).items()):
        if "peer_time_us" in cell:
            ours, ref = med(cell["ip_time_us"]), med(cell["peer_time_us"])
            lines.append(f"- {size_label(s)}, gloo backend ≤ raw gloo: {n[4:]} {ours:.1f} µs vs "
                         f"{ref:.1f} µs: {verdict(ours <= ref)}")
# (shm's native collectives wrap no library call: its ratio column is against MPI_Allreduce)
for n in (n for n in sweeps if n.endswith("_native") and n.startswith("bw_") and "shm" not in n):
    for s, cell in sorted(sweeps[n].items()):
        if s >= 64 << 10 and "ratio" in cell:
            r = med(cell["ratio"])
            lines.append(f"- ≥ 64 KiB, native overhead ≤ 5%: {n[3:]} {size_label(s)}: "
                         f"{r:.3f}× the raw call: {verdict(r >= 0.95)}")
# shm, 2 processes: against MPI_Allreduce and raw gloo, and against the memory bound of the same
# round (bench/kernels.cpp "copy, 2 threads": an allreduce of 2 ranks reads n and writes n bytes per
# rank, 4n in all, so its busbw, n / t, is at most copy's 2N-counted rate / 4).
shm_rounds = {}
for path in glob.glob(os.path.join(root, "bw_shm_native_[0-9]*.csv")):
    rnd = re.search(r"_(\d+)\.csv$", path).group(1)
    with open(path, newline="") as f:
        shm_rounds[rnd] = {int(r["size"]): r for r in csv.DictReader(f)}
membw = {}
for path in glob.glob(os.path.join(root, "membw_[0-9]*.txt")):
    with open(path) as f:
        m = re.search(r"copy, 2 threads: ([0-9.]+) GB/s", f.read())
    if m:
        membw[re.search(r"_(\d+)\.txt$", path).group(1)] = float(m.group(1))
gloo_raw = sweeps.get("bw_gloo_native", {})
for s in (32 << 20, 128 << 20):
    cell = sweeps.get("bw_shm_native", {}).get(s)
    if not cell or "ratio" not in cell:
        continue
    r = med(cell["ratio"])
    lines.append(f"- shm ≥ 3× MPI_Allreduce, {size_label(s)}: {med(cell['ip_busbw_GBps']):.2f} GB/s, "
                 f"{r:.2f}× MPI's {med(cell['peer_busbw_GBps']):.2f}: {verdict(r >= 3)}")
    if s == 32 << 20 and "peer_busbw_GBps" in gloo_raw.get(s, {}):
        g = med(gloo_raw[s]["peer_busbw_GBps"])
        lines.append(f"- shm ≥ 10× raw gloo, 32 MiB: {med(cell['ip_busbw_GBps']) / g:.2f}× gloo's "
                     f"{g:.2f} GB/s: {verdict(med(cell['ip_busbw_GBps']) >= 10 * g)}")
    fractions = [float(shm_rounds[k][s]["ip_busbw_GBps"]) / (membw[k] / 4)
                 for k in sorted(membw) if k in shm_rounds and s in shm_rounds[k]]
    if fractions:
        bound = med([membw[k] / 4 for k in membw])
        lines.append(f"- shm ≥ 40% of the memory bound, {size_label(s)}: {100 * med(fractions):.0f}% "
                     f"(per round {', '.join(f'{100 * x:.0f}%' for x in fractions)}; bound "
                     f"{bound:.2f} GB/s, copy with 2 threads / 4): {verdict(med(fractions) >= 0.4)}")
for s, cell in sorted(sweeps.get("lat_shm_native", {}).items()):
    if s <= 4096 and "peer_time_us" in cell:
        ours, ref = med(cell["ip_time_us"]), med(cell["peer_time_us"])
        lines.append(f"- shm latency ≤ 1.0× MPI_Allreduce, {size_label(s)}: {ours:.2f} µs vs "
                     f"{ref:.2f} µs = {ours / ref:.2f}×: {verdict(ours <= ref)}")
for name, modes in profiles.items():
    fused, unfused, flat = (med(modes.get(k, [])) for k in ("fused", "unfused", "flat"))
    if fused and flat:
        limit = 1.1 if "shm" in name else 1.2
        lines.append(f"- ResNet-50 fused ≤ {limit}× flat: {name[5:]}: {fused / flat:.2f}×: "
                     f"{verdict(fused <= limit * flat)}")
    if fused and unfused and "gloo" in name:
        lines.append(f"- ResNet-50 on gloo, fused ≥ 3× faster than unfused: {name[5:]}: "
                     f"{unfused / fused:.2f}×: {verdict(unfused >= 3 * fused)}")
print("\n".join(lines) if lines else "(no data)")
