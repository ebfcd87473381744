#!/usr/bin/env python3
"""Summarise the JSON files of serve-2core.sh (or the H200 runs of
serve-2core.md): per configuration, the median over runs of each run's
median s/version for live before/after and shadow, the shadow apply
against its plain copy, and push_start's blocking share.
Usage: serve-summary.py DIR"""
import glob
import json
import os
import statistics
import sys


def rows(path):
    with open(path) as f:
        return json.load(f)


def main(d):
    ab = {}
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        name = os.path.basename(f)[:-5]
        if "-push-" in name:
            continue
        # TAG-KIND-REP
        tag, kind, _ = name.rsplit("-", 2)
        ab.setdefault(tag, {}).setdefault(kind, []).extend(rows(f))
    print("| model, provider | before live s/v | after live s/v | after/before "
          "| shadow wait s/v | shadow/live | apply s | apply GB/s | copy s "
          "| copy GB/s | apply/copy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for tag, k in sorted(ab.items()):
        def med(kind, field):
            v = [r[field] for r in k.get(kind, []) if field in r]
            return statistics.median(v) if v else float("nan")

        def span(kind, field):
            v = [r[field] for r in k.get(kind, []) if field in r]
            return f"{min(v):.4f}-{max(v):.4f}" if v else "-"
        b, a, s = (med(x, "seconds_per_version")
                   for x in ("before", "live", "shadow"))
        print(f"| {tag} | {b:.4f} ({span('before', 'seconds_per_version')}) "
              f"| {a:.4f} ({span('live', 'seconds_per_version')}) "
              f"| {a / b:.2f} | {s:.4f} ({span('shadow', 'seconds_per_version')}) "
              f"| {s / a:.2f} | {med('shadow', 'apply_s'):.5f} "
              f"| {med('shadow', 'apply_gb_s'):.2f} "
              f"| {med('shadow', 'copy_s'):.5f} "
              f"| {med('shadow', 'copy_gb_s'):.2f} "
              f"| {med('shadow', 'apply_vs_copy'):.2f} |")
    push = sorted(glob.glob(os.path.join(d, "*-push-*.json")))
    if push:
        print()
        print("| run | blocking push s | push_start: trainer blocked s "
              "(push_start + push_wait) | share | push itself s | train s |")
        print("|---|---|---|---|---|---|")
    for f in push:
        r = {x.get("push"): x for x in rows(f)}
        blk, st = r.get("block"), r.get("start")
        if blk is None or st is None:
            continue
        print(f"| {os.path.basename(f)[:-5]} | {blk['push_block_s']:.4f} "
              f"| {st['push_block_s']:.6f} ({st['push_start_s']:.6f} + "
              f"{st['push_wait_s']:.6f}) "
              f"| {100 * st['push_block_vs_blocking']:.1f}% "
              f"| {st['seconds_per_version']:.4f} | {st['train_s']:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
