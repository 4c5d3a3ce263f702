"""Export the deployed kernels as a small Python package that needs only torch and triton.

The package must be safe to use without kernelscout: each op module carries the reference (copied from
the problem file, checked against the hash the promotion recorded) and dispatches to a kernel only
where the evidence covers the call. Which input dimension a size constant such as `N` controls is not
declared by the problem format, so it is found by probing: the reference's `get_inputs()` is called
with distinct primes bound to the constants, twice, and each constant must show in the same place.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import keyword
import pprint
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import jinja2

from agent.lifecycle.evidence import PromotionEvidence, problem_device
from agent.lifecycle.gate import LifecycleError, current_problem
from agent.lifecycle.registry import DeployedEntry, deployed_entries
from evaluation.records import ProblemInfo

_PROBES = ((101, 103, 107, 109, 113, 127, 131, 137), (139, 149, 151, 157, 163, 167, 173, 179))


class ExportError(LifecycleError):
    """The deployed kernels cannot be exported (nothing deployed, a changed reference, a bad name)."""


def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("agent.lifecycle", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def _identifier(text: str) -> str:
    ident = re.sub(r"\W", "_", text).strip("_").lower() or "op"
    return f"op_{ident}" if ident[0].isdigit() or keyword.iskeyword(ident) else ident


def _reference(store, evidence: PromotionEvidence) -> tuple[ProblemInfo, str]:
    """The problem and its source text, which must be the source the promotion was proven against."""
    problem = current_problem(store, evidence.problem_id, evidence.problem_name, problem_device(evidence))
    text = Path(problem.source_path).read_text()
    sha = hashlib.sha256(text.encode()).hexdigest()
    if sha != evidence.problem_source_sha256:
        raise ExportError(
            f"the reference of {evidence.op} changed since {evidence.candidate_id[:12]} was promoted on "
            f"{evidence.arch} (sha256 {evidence.problem_source_sha256[:12]} -> {sha[:12]})"
        )
    return problem, text


def probe_bindings(path: str, constants: list[str]) -> tuple[dict[str, tuple[int, int]], list]:
    """Where each size constant shows in `get_inputs()`: {name: (input index, dim)}, and input ranks.

    The problem module is built the way the evaluator builds a shape case (constants rebound before
    the body runs), so the dispatcher reads shapes exactly as the evidence was produced.
    """
    from evaluation.problem import exec_problem

    if len(constants) > len(_PROBES[0]):
        raise ExportError(f"{path}: too many size constants to probe ({len(constants)})")
    found: list[dict[str, tuple[int, int]]] = []
    ranks: list = []
    for probe in _PROBES:
        inputs = exec_problem(path, dict(zip(constants, probe))).get_inputs()
        ranks = [x.dim() if hasattr(x, "dim") else None for x in inputs]
        where: dict[str, tuple[int, int]] = {}
        for name, value in zip(constants, probe):
            for index, x in enumerate(inputs):
                dims = list(getattr(x, "shape", ()))
                if value in dims:
                    where[name] = (index, dims.index(value))
                    break
        found.append(where)
    unbound = [c for c in constants if c not in found[0] or found[0].get(c) != found[1].get(c)]
    if unbound:
        raise ExportError(
            f"{path}: size constant(s) {', '.join(unbound)} do not show as an input dimension of "
            "get_inputs(), so the dispatcher could not check the proven range"
        )
    return found[0], ranks


def _op_files(op: str, entries: list[DeployedEntry], store, env: jinja2.Environment, stamp: dict) -> tuple[dict, dict]:
    """The files of one op and its manifest section."""
    mod = _identifier(op)
    evidences = [e.evidence for e in entries if e.evidence is not None]
    if len(evidences) != len(entries):
        raise ExportError(f"{op}: a deployed kernel has no recorded evidence")
    shas = {ev.problem_source_sha256 for ev in evidences}
    if len(shas) != 1:
        raise ExportError(f"{op}: the deployed kernels were proven against different reference sources")
    problem, reference = _reference(store, evidences[0])
    constants = sorted({name for ev in evidences for name in ev.assumptions.shape_range})
    bindings, ranks = probe_bindings(problem.source_path, constants)

    files = {f"_{mod}_reference.py": reference}
    kernels: dict[str, Any] = {}
    section: dict[str, Any] = {
        "module": mod,
        "problem_name": problem.name,
        "problem_source_sha256": problem.source_sha256,
        "bindings": {k: list(v) for k, v in bindings.items()},
        "kernels": {},
    }
    for entry, ev in zip(entries, evidences):
        candidate = store.get_candidate(ev.candidate_id, run_id=ev.run_id)
        kmod = f"_{mod}_{_identifier(entry.arch)}"
        files[f"{kmod}.py"] = candidate.source
        kernels[entry.arch] = {
            "module": kmod,
            "candidate_id": ev.candidate_id,
            "dtypes": list(ev.assumptions.dtypes),
            "shape_range": {k: r.model_dump() for k, r in ev.assumptions.shape_range.items()},
        }
        section["kernels"][entry.arch] = {
            "candidate_id": ev.candidate_id,
            "candidate_source_sha256": hashlib.sha256(candidate.source.encode()).hexdigest(),
            "deployed_since": entry.since,
            "approved_by": entry.approved_by,
            "evidence": json.loads(ev.model_dump_json()),
            "versions": {
                k: getattr(ev.env, k)
                for k in ("triton_version", "torch_version", "driver_version", "cuda_version", "hip_version")
            },
        }
    files[f"{mod}.py"] = env.get_template("export_op.py.j2").render(
        op=op,
        problem_name=problem.name,
        reference_module=f"_{mod}_reference",
        kernels=pprint.pformat(kernels, sort_dicts=True, width=100),
        bindings=pprint.pformat(bindings, sort_dicts=True),
        input_ranks=repr(ranks),
        **stamp,
    )
    return files, section


def export_package(store, out_dir: Path, *, name: str = "kscout_kernels", force: bool = False) -> dict:
    """Write OUT_DIR/NAME/ (importable with OUT_DIR on sys.path); returns the manifest."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ExportError(f"--name {name!r} is not a valid Python package name")
    target = Path(out_dir) / name
    if target.exists() and not force:
        raise ExportError(f"{target} already exists; pass --force to replace it")
    live = [e for e in deployed_entries(store) if e.candidate_id is not None]
    if not live:
        raise ExportError("nothing is deployed: promote a kernel first (kscout promote)")
    by_op: dict[str, list[DeployedEntry]] = {}
    for e in live:
        by_op.setdefault(e.op, []).append(e)

    import evaluation

    env = _templates()
    stamp = {"version": evaluation.__version__, "exported_at": _dt.datetime.now(_dt.timezone.utc).isoformat()}
    files: dict[str, str] = {}
    ops: dict[str, Any] = {}
    for op, entries in sorted(by_op.items()):
        op_files, section = _op_files(op, entries, store, env, stamp)
        files.update(op_files)
        ops[op] = section
    modules = [ops[op]["module"] for op in sorted(ops)]
    if len(set(modules)) != len(modules):
        raise ExportError(f"two ops map to the same module name: {modules}")
    manifest = {
        "package": name,
        "kernelscout_version": stamp["version"],
        "exported_at": stamp["exported_at"],
        "ops": ops,
    }
    files["__init__.py"] = env.get_template("export_init.py.j2").render(
        ops=modules, ops_repr=repr(tuple(modules)), **stamp
    )
    files["_runtime.py"] = env.get_template("export_runtime.py.j2").render(**stamp)
    files["manifest.json"] = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    _write_atomically(target, files)
    return manifest


def _write_atomically(target: Path, files: dict[str, str]) -> None:
    """Build the package beside the target and swap it in, so a failure leaves the old one intact."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for rel, text in files.items():
            (staging / rel).write_text(text)
        old: Optional[Path] = None
        if target.exists():
            old = target.with_name(f".{target.name}-old-{staging.name[-8:]}")
            target.rename(old)
        staging.rename(target)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
