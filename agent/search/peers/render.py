"""Render the template kernels that `agent.search.peers` times, from knob files, into plain Python files.

The GPU host that runs `python -m agent.search.peers` needs only torch and Triton, so the kernels travel as
rendered files. This module is the other half and needs kernelscout's own dependencies (jinja2, pydantic):

    python -m agent.search.peers.render                                  # agent/search/peers/best_knobs.json -> agent/search/peers/kernels/
    python -m agent.search.peers.render --knobs SWEEP.json --out DIR     # a sweep: DIR/<op>/<variant>.py

A knob file maps each op to one configuration ({op: knobs}, rendered to OUT/<op>.py) or to named variants
({op: {variant: knobs}}, rendered to OUT/<op>/<variant>.py). Configurations may be partial: the template's
defaults fill the rest, so a test re-renders the committed kernels to catch templates that moved on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROBLEMS = ROOT / "evaluation" / "problems"
BEST_KNOBS = Path(__file__).resolve().parent / "best_knobs.json"
KERNELS = Path(__file__).resolve().parent / "kernels"


def is_variants(entry: dict) -> bool:
    """{variant: knobs} rather than one knob dict (every value is itself a dict)."""
    return bool(entry) and all(isinstance(v, dict) for v in entry.values())


def render_op(op: str, knobs: dict) -> str:
    from agent.proposers import knobs as K
    from agent.proposers.family import match_family
    from agent.proposers.template import render

    template = K.TEMPLATE_OF_FAMILY[op]
    return render(match_family(PROBLEMS / f"{op}.py"), K.validate(template, knobs, partial=True))


def render_all(knob_file: Path) -> dict[str, str]:
    """Relative output path -> source, for every configuration in the file."""
    spec = json.loads(knob_file.read_text())
    out: dict[str, str] = {}
    for op, entry in sorted(spec.items()):
        if op.startswith("_"):  # "_comment" and friends
            continue
        if is_variants(entry):
            for name, knobs in sorted(entry.items()):
                out[f"{op}/{name}.py"] = render_op(op, knobs)
        else:
            out[f"{op}.py"] = render_op(op, entry)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agent.search.peers.render", description=__doc__.split("\n\n")[0])
    ap.add_argument("--knobs", type=Path, default=BEST_KNOBS)
    ap.add_argument("--out", type=Path, default=KERNELS)
    args = ap.parse_args(argv)
    for rel, source in render_all(args.knobs).items():
        path = args.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
