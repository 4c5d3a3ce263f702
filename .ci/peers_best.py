"""One line per row of a peers.csv (agent/search/peers): the fastest kernel variant against eager and
torch.compile, from the same run, and the runner-up, so a sweep's outcome fits the GPU call's summary."""

import csv
import sys
from collections import defaultdict


def main(path: str) -> None:
    rows: dict[str, list[dict]] = defaultdict(list)
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows[r["row"]].append(r)
    for row, entries in rows.items():
        base = {r["provider"]: float(r["p50_ms"]) for r in entries if r["status"] == "timed" and r["p50_ms"]}
        kernels = sorted((ms, p) for p, ms in base.items() if p.startswith("kernel"))
        if not kernels:
            print(f"{row}: no kernel timed ({', '.join(sorted({r['status'] for r in entries}))})")
            continue
        ms, best = kernels[0]
        ratios = ", ".join(f"{base[p] / ms:.2f}x {p}" for p in ("eager", "torch_compile") if p in base)
        second = f"; next {kernels[1][1]} {kernels[1][0]:.4f} ms" if len(kernels) > 1 else ""
        print(f"{row}: {best} {ms:.4f} ms ({ratios}){second}")


if __name__ == "__main__":
    main(sys.argv[1])
