#!/usr/bin/env python3
"""Markdown tables from `trainer feature-study` outputs: the study_*.json files given."""
import json, math, sys

for path in sys.argv[1:]:
    if True:
        seeds = json.load(open(path))
        print(f"\n{path}:\n")
        print("| seed | arm | geomean | worst (matrix) | real geomean | real worst | validation | leaves s1/s2 |")
        print("|---|---|---|---|---|---|---|---|")
        agg = {}
        for s in seeds:
            for a in s["arms"]:
                print(f"| {s['seed']} | {a['arm']} | {a['geomean']:.4f} | {a['worst']:.4f} ({a['worst_matrix']}) | "
                      f"{a['geomean_real']:.4f} | {a['worst_real']:.4f} | {a['validation']:.4f} | {a['leaves'][0]}/{a['leaves'][1]} |")
                agg.setdefault(a["arm"], []).append(a)
        for arm, xs in agg.items():
            g = math.exp(sum(math.log(a["geomean"]) for a in xs) / len(xs))
            gr = math.exp(sum(math.log(a["geomean_real"]) for a in xs) / len(xs))
            print(f"| all {len(xs)} | {arm} | {g:.4f} | min {min(a['worst'] for a in xs):.4f} | {gr:.4f} | "
                  f"min {min(a['worst_real'] for a in xs):.4f} | | |")
        sh, ex = agg.get("shipped", []), agg.get("extended", [])
        both = sum(1 for a, b in zip(sh, ex) if b["geomean"] > a["geomean"] and b["worst"] >= a["worst"])
        worse = sum(1 for a, b in zip(sh, ex) if b["geomean"] < a["geomean"])
        print(f"\nextended better on geomean and no worse on worst: {both} of {len(sh)} seeds; lower geomean: {worse} of {len(sh)}")
