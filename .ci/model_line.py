"""One line of `.ci/gpu model`'s summary from a `kscout optimize-model --json` report: the verdict, the
whole model's speed against eager and torch.compile, the predicted speed from the region table, and
which regions took a kernel. A report that is missing or not JSON gives a line that says so."""

import json
import sys


def line(path: str, stem: str, wall: str, rc: str = "?") -> str:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError as exc:
        return f"model {stem}: no report ({type(exc).__name__}), exit {rc}, {wall} s wall"
    if not text:
        killed = " (timed out: MODEL_TIMEOUT)" if rc in ("124", "137") else ""
        return f"model {stem}: no report, the command printed nothing; exit {rc}{killed}, {wall} s wall"
    try:
        d = json.loads(text.splitlines()[-1])
    except ValueError as exc:
        return f"model {stem}: no report ({type(exc).__name__}), exit {rc}, {wall} s wall"
    rows = d.get("regions", [])
    searched = [r for r in rows if r.get("state") == "searched"]
    won = [
        f"{r['name']}:{r.get('schedule') or '?'}@" + (f"{r['speedup']:.2f}x" if r.get("speedup") else "not timed")
        for r in rows
        if r.get("kernel")
    ]
    speed = "not timed"
    if d.get("speedup"):
        speed = f"{d['speedup']:.3f}x eager [{d.get('speedup_low') or 0:.3f}, {d.get('speedup_high') or 0:.3f}]"
        if d.get("compile_speedup"):
            speed += f", {d['compile_speedup']:.3f}x torch.compile"
        if d.get("autotune_speedup"):
            speed += f", {d['autotune_speedup']:.3f}x max-autotune"
        if d.get("vs_user_choice"):
            speed += f", {d['vs_user_choice']:.3f}x the faster of eager and torch.compile"
    # what the regions' own speedups predict, glue unchanged (ModelReport.predicted_speedup); none where a
    # region's kernel was not timed
    predicted = ""
    if all(r.get("speedup") for r in rows if r.get("kernel")):
        before = sum(r.get("time_us", 0.0) for r in rows) + d.get("glue_us", 0.0)
        after = sum(r["time_us"] / r["speedup"] if r.get("kernel") else r.get("time_us", 0.0) for r in rows)
        after += d.get("glue_us", 0.0)
        predicted = f", predicted {before / after:.3f}x" if after > 0 else ""
    # why searched regions kept their reference ops (their run's counts, failures and stop)
    kept = "".join(f"\n  {r['name']}: {r['reason']}" for r in searched if not r.get("kernel") and r.get("reason"))
    return (
        f"model {stem}: {d.get('verdict')}, {speed}{predicted}; {len(rows)} regions, {len(searched)} searched "
        f"({sum(1 for r in searched if not r.get('same_as'))} searches), "
        f"kernels {', '.join(won) or 'none'}; {wall} s wall{kept}"
    )


if __name__ == "__main__":
    print(line(*sys.argv[1:5]))
