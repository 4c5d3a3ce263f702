"""The kernel in hand: a run's kernel as a file a user can read, re-evaluate and use.

The file is the candidate's source exactly as it was evaluated, under a header of comments that says
what it is for (problem, device, versions), what it is worth (vs eager and torch.compile, from the
summary's verdict), where it came from (run and candidate ids), how to judge it again
(`kscout eval FILE --problem ...`) and how to run it on a CPU (TRITON_INTERPRET=1). Comments only,
so the file is still a valid candidate; its hash is not the candidate id any more, which is why the
header carries the id.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Optional

from agent.search.summary import KernelView, RunSummary, label, verdict_line

DEFAULT_DIR = Path("kscout-best")
# Triton picks its interpreter when @triton.jit runs, that is when this file is imported.
CPU_HINT = (
    "set TRITON_INTERPRET=1 before this file is imported (e.g. TRITON_INTERPRET=1 python app.py), "
    "so that Triton's interpreter runs its kernels; kscout eval sets it itself"
)


def default_path(summary: RunSummary) -> Path:
    """./kscout-best/<problem>-<run>.py (characters a shell or a file system would trip on become _)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", summary.problem_name).strip("._") or "problem"
    return DEFAULT_DIR / f"{name}-{summary.run_id}.py"


def reeval_command(summary: RunSummary, path: str) -> str:
    """The command that judges the file again against the problem the run searched."""
    device = summary.device if summary.device in ("cpu", "cuda") else "auto"
    parts = ["kscout", "eval", path, "--problem", summary.problem_ref, "--device", device]
    for dtype in summary.dtypes:
        parts += ["--dtype", dtype]
    for case in summary.time_cases:
        parts += ["--time-case", case]
    return " ".join(shlex.quote(p) for p in parts)


def _versions(summary: RunSummary) -> str:
    env = summary.env
    if env is None:
        return "environment not recorded"
    parts = [
        f"torch {env.torch_version}",
        f"Triton {env.triton_version}",
        f"Python {env.python_version}",
        f"kernelscout {env.kernelscout_version}",
    ]
    if env.driver_version:
        parts.insert(0, f"driver {env.driver_version}")
    if env.cuda_version:
        parts.insert(1 if env.driver_version else 0, f"CUDA {env.cuda_version}")
    if env.hip_version:
        parts.insert(0, f"HIP {env.hip_version}")
    return ", ".join(parts)


def verdict_lines(summary: RunSummary, kernel: KernelView) -> list[str]:
    """The verdict in plain sentences (one per line), the same words `show` prints."""
    lines = []
    if kernel.status != "passed":
        return [f"status {kernel.status}: this candidate did not pass; it is not a kernel to use"]
    n_cases = len(kernel.checks)
    lines.append(f"correct on all {n_cases} declared cases ({', '.join(sorted({c.dtype for c in kernel.checks}))})")
    v = kernel.verdict
    if v is None or not v.measured:
        why = v.not_measured[0].reason if v is not None and v.not_measured else None
        lines.append(f"speed not measured: {why or summary.timing_note or 'nothing was timed'}")
    else:
        src = v.how or ("its search evaluation" if v.numbers_from == "search" else "the re-measure")
        lines.append(f"speed ({src}): {verdict_line(v)}")
        for c in v.cases:
            ratios = ", ".join(f"{r.ratio:.3g}x vs {label(b)}" for b, r in c.vs.items())
            bw = f", {c.gbps:.0f} GB/s ({c.pct_of_copy:.1f}% of copy)" if c.gbps and c.pct_of_copy else ""
            lines.append(f"  {c.case_id}: p50 {c.latency_ms_p50:.4g} ms, {ratios}{bw}")
        if v.uncovered_cases:
            lines.append(f"  not timed: {', '.join(v.uncovered_cases)}")
    if not kernel.picked:
        lines.append(
            "not the run's pick: "
            + (summary.note if summary.best is None else f"the run picked {summary.best.candidate_id[:12]}")
        )
    return lines


def render(summary: RunSummary, kernel: KernelView, source: str, path: Optional[str]) -> str:
    """Header + source. `path`: how the re-evaluate line names the file (None: a placeholder)."""
    env = summary.env
    device = f"{env.device_name} ({env.arch})" if env else summary.arch
    head = [
        f"kernelscout kernel for {summary.problem_name} (problem {summary.problem_id}, {summary.op_family})",
        f"device: {device}; {_versions(summary)}",
        f"run {summary.run_id}, candidate {kernel.candidate_id} ({kernel.proposer})",
        *verdict_lines(summary, kernel),
        *([f"dot precision: {'; '.join(kernel.dot_precision)}"] if kernel.dot_precision else []),
        f"re-evaluate: {reeval_command(summary, path or 'THIS_FILE.py')}",
        f"on a CPU: {CPU_HINT}",
        "(this header is comments only; below it is the candidate exactly as it was evaluated)",
    ]
    return "".join(f"# {line}\n" for line in head) + "\n" + source


def write(summary: RunSummary, kernel: KernelView, source: str, out: Optional[Path] = None) -> Path:
    path = out or default_path(summary)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(summary, kernel, source, str(path)))
    tmp.replace(path)
    return path
