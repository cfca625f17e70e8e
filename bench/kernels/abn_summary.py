"""abn_summary.py - per build and shape, the lazy overhead range and the lazy / twin
times (min..max over rounds) of an abn_device.sh output directory, one line each, so
that a run on the GPU machine returns a few lines instead of every round's log. BUILD as given
to abn_device.sh (a folder such as build/cuda too).

Usage: python3 bench/kernels/abn_summary.py OUTDIR BUILD [BUILD ...]
"""
import re
import sys
import glob

PAT = re.compile(r"^(decode|prefill)\s+(\S+)\s*=\s*(\d+)\s+N=\s*(\d+):.*?lazy\s+([\d.]+) us.*?twin\s+([\d.]+) us.*?overhead\s+([+-][\d.]+)%")


def main():
    out, builds = sys.argv[1], sys.argv[2:]
    for b in builds:
        rows = {}
        for f in sorted(glob.glob(f"{out}/{b.replace('/', '_')}/bench*.log")):
            for line in open(f):
                m = PAT.match(line)
                if m:
                    key = f"{m.group(1)[0]}{m.group(3)}x{m.group(4)}"
                    rows.setdefault(key, []).append((float(m.group(5)), float(m.group(6)), float(m.group(7))))
        for key, v in rows.items():
            lz, tw, ov = zip(*v)
            print(f"{b:6s} {key:10s} ov {min(ov):+.2f}..{max(ov):+.2f}%  lazy {min(lz):.2f}-{max(lz):.2f}  "
                  f"twin {min(tw):.2f}-{max(tw):.2f}  ({len(v)} rounds)")


main()
