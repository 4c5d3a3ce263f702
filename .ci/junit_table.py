"""The GPU suite's JUnit XML files as one Markdown table: one row per test, its outcome and seconds, then totals."""

import sys
import xml.etree.ElementTree as ET


def main(paths: list[str]) -> None:
    rows, counts = [], {}
    cases = [case for path in paths for case in ET.parse(path).getroot().iter("testcase")]
    for case in cases:
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                reason = (node.get("message") or "").splitlines()[0][:70] if node.get("message") else ""
                outcome += f" ({reason})" if reason else ""
                break
        counts[outcome.split(" ")[0]] = counts.get(outcome.split(" ")[0], 0) + 1
        module = case.get("classname", "").rsplit(".", 1)[-1]
        rows.append((f"{module}::{case.get('name')}", outcome, float(case.get("time", 0))))
    print("| test | outcome | s |\n|---|---|---|")
    for name, outcome, seconds in rows:
        print(f"| {name} | {outcome} | {seconds:.1f} |")
    total = sum(r[2] for r in rows)
    print(f"\n{', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}; {total:.0f} s in tests")


if __name__ == "__main__":
    main(sys.argv[1:])
