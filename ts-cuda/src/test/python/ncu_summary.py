"""Sums an ncu CSV (--metrics gpu__time_duration.sum --csv) per kernel name.

The profile covers `--launch-count` launches of a steady decode loop; with the number of forward
passes it spans (counted from the embedding kernel, else the argument), prints each kernel's launches and microseconds per forward pass, their sum (the
GPU's busy time per forward) and the share of each kernel.
"""

import collections
import csv
import sys


def main():
    path, forwards = sys.argv[1], float(sys.argv[2])
    time_us = collections.defaultdict(float)
    count = collections.Counter()
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        # older Nsight Compute writes nsecond, newer ns
        scale = {
            "nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0,
            "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6,
        }[unit]
        name = row["Kernel Name"].split("(")[0][:60]
        time_us[name] += value * scale
        count[name] += 1
    # a forward pass embeds its tokens once: count the passes where the profile holds whole ones
    embeds = count.get("embed_bf16", 0) + count.get("embed_f32", 0)
    if embeds:
        forwards = float(embeds)
    total = sum(time_us.values())
    print(f"{'kernel':60s} {'launches/fwd':>12s} {'us/fwd':>10s} {'share':>7s}")
    for name, t in sorted(time_us.items(), key=lambda kv: -kv[1]):
        print(f"{name:60s} {count[name] / forwards:12.1f} {t / forwards:10.1f} {t / total:7.1%}")
    print(f"{'total':60s} {sum(count.values()) / forwards:12.1f} {total / forwards:10.1f}")


if __name__ == "__main__":
    main()
