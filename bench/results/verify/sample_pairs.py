"""Summary of sample.sh's output: per model and mode, each round's
s/version over the same round's off, then the median and range."""
import re
import statistics
import sys

rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) shm round (\d+) (\S+): (\S+)", line)
    if m:
        model, r, mode, s = m.groups()
        rows.setdefault(model, {}).setdefault(int(r), {})[mode] = float(s)
print("%-40s %-10s %-8s %s" % ("model", "mode", "median", "range (per-round ratio to off)"))
for model, rounds in rows.items():
    for mode in ("sample:16", "sample:64"):
        ratios = [d[mode] / d["off"] for d in rounds.values() if mode in d and "off" in d]
        print("%-40s %-10s %+6.1f %%  %+.1f .. %+.1f %% (%d rounds)" % (
            model, mode, (statistics.median(ratios) - 1) * 100,
            (min(ratios) - 1) * 100, (max(ratios) - 1) * 100, len(ratios)))
    offs = [d["off"] for d in rounds.values()]
    print("%-40s %-10s off: median %.4f s, range %.4f .. %.4f" % (
        model, "", statistics.median(offs), min(offs), max(offs)))
