"""ptxas_table.py - the markdown table of registers, stack frame and spills
per kernel from build/cuda/ptxas.txt (make cuda).

Usage: python3 bench/kernels/ptxas_table.py [build/cuda/ptxas.txt]
"""
import re
import sys


def main(path):
    rows, cur = [], None
    for line in open(path):
        m = re.search(r"Compiling entry function '(.*)' for", line)
        if m:
            name = m.group(1)
            for junk in ("void (anonymous namespace)::", "(anonymous namespace)::", "void ",
                         "(lz_decode_params, int)", "(lz_prefill_params, int)", "(lz_rerotate_params)"):
                name = name.replace(junk, "")
            name = re.sub(r"\(__nv_bfloat16\*.*\)", "", name)
            cur = {"name": name}
            rows.append(cur)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur is not None and "stack" not in cur:
            cur["stack"], cur["st"], cur["ld"] = m.groups()
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur is not None and "regs" not in cur:
            cur["regs"] = m.group(1)
    print("| kernel (template args) | registers | stack frame B | spill stores B | spill loads B |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| `%s` | %s | %s | %s | %s |" % (r["name"], r.get("regs", "?"), r.get("stack", "?"),
                                               r.get("st", "?"), r.get("ld", "?")))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/cuda/ptxas.txt")
