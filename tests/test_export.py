"""`kscout export`: a package of the deployed kernels that runs in a fresh process without kernelscout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from test_lifecycle_support import SEED, add_candidate, make_run, variant, write_deployment

import evaluation
from agent.cli import main
from agent.lifecycle.export import ExportError, export_package
from store import Store

KERNEL_MODULE = "kscout_kernels._layernorm_cpu"

# Runs in a fresh interpreter: imports only the exported package (never kernelscout), checks each call
# against the reference and reports which path ran.
CHECK = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, sys.argv[1])
    shapes = json.loads(sys.argv[2])
    from kscout_kernels import layernorm, manifest

    torch.manual_seed(0)
    out = {}

    def call(name, m, n, dtype=torch.float32, transpose=False):
        model = layernorm.Model(n).to(dtype)
        x = torch.randn(n, m, dtype=dtype).t() if transpose else torch.randn(m, n, dtype=dtype)
        y = model(x)
        ref = model.reference(x)
        out[name] = {"path": model.last_path, "reason": model.last_reason,
                     "max_abs_diff": float((y - ref).abs().max()), "kernel_imported": %r in sys.modules}

    for name, (m, n) in shapes["outside"].items():
        call(name, m, n)
    m, n = shapes["inside"][0]
    call("non_contiguous", m, n, transpose=True)
    call("float64", m, n, dtype=torch.float64)
    for i, (m, n) in enumerate(shapes["inside"]):
        call(f"inside_{i}", m, n)
    out["kernelscout_imported"] = any(k.split(".")[0] in ("agent", "evaluation", "store") for k in sys.modules)
    out["ops"] = list(manifest()["ops"])
    print(json.dumps(out))
    """
    % KERNEL_MODULE
)


def proven(problem, name):
    values = [c.params[name] for c in problem.shape_cases]
    return min(values), max(values)


@pytest.fixture(scope="module")
def cpu_problem():
    return evaluation.load_problem("layernorm", device="cpu")


@pytest.fixture
def deployed_store(tmp_path, cpu_problem):
    """The layernorm seed deployed for the CPU arch (hand-built evidence: the gate refuses CPU results)."""
    home = tmp_path / "store"
    with Store.open(home) as store:
        run = make_run(store, cpu_problem, evaluation.fingerprint("cpu"))
        seed = add_candidate(store, run, SEED)
        write_deployment(store, cpu_problem, seed, evaluation.fingerprint("cpu"))
    return home, seed.candidate_id


def test_exported_package_uses_the_kernel_inside_the_proven_range_and_the_reference_outside(
    tmp_path, deployed_store, cpu_problem
):
    home, seed_id = deployed_store
    out_dir = tmp_path / "out"
    with Store.open(home) as store:
        manifest = export_package(store, out_dir)
    (m_lo, m_hi), (n_lo, n_hi) = proven(cpu_problem, "M"), proven(cpu_problem, "N")
    shapes = {
        "outside": {"outside_M": [m_hi + 8, n_hi], "outside_N": [m_lo, 2 * n_hi + 1]},
        "inside": [[m_hi, n_hi], [m_lo, n_lo], [(m_lo + m_hi) // 2, (n_lo + n_hi) // 2]],
    }
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": ""}
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, str(out_dir), json.dumps(shapes)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])

    for name in ("outside_M", "outside_N", "non_contiguous", "float64"):
        assert got[name]["path"] == "reference", (name, got[name])
        assert got[name]["max_abs_diff"] == 0.0  # the reference path is the reference itself
        assert got[name]["kernel_imported"] is False  # no kernel module loaded before an in-range call
    assert got["outside_M"]["reason"] == f"M={m_hi + 8} outside the proven range [{m_lo}, {m_hi}] (multiple of 1)"
    assert got["outside_N"]["reason"] == f"N={2 * n_hi + 1} outside the proven range [{n_lo}, {n_hi}] (multiple of 1)"
    assert got["non_contiguous"]["reason"] == "non-contiguous input"
    assert got["float64"]["reason"].startswith("dtype torch.float64 not proven")

    for i in range(3):  # the largest proven shape, the smallest, and an untested one inside the range
        assert got[f"inside_{i}"]["path"] == "cpu" and got[f"inside_{i}"]["kernel_imported"] is True, got
        assert got[f"inside_{i}"]["max_abs_diff"] < 1e-4  # the Triton kernel agrees with the reference
    assert got["kernelscout_imported"] is False and got["ops"] == ["layernorm"]

    kernel = manifest["ops"]["layernorm"]["kernels"]["cpu"]
    assert kernel["candidate_id"] == seed_id and kernel["approved_by"] == "alice"
    assert kernel["versions"]["torch_version"] == evaluation.fingerprint("cpu").torch_version
    assert kernel["evidence"]["assumptions"]["shape_range"]["N"] == {
        "min": n_lo,
        "max": n_hi,
        "multiple_of": 1,
    }
    assert manifest["ops"]["layernorm"]["bindings"] == {"M": [0, 0], "N": [0, 1]}
    on_disk = json.loads((out_dir / "kscout_kernels" / "manifest.json").read_text())
    assert on_disk == manifest
    assert (out_dir / "kscout_kernels" / "_layernorm_cpu.py").read_text() == SEED


def test_export_refuses_an_existing_package_unless_forced_and_keeps_it_intact(tmp_path, deployed_store):
    home, _ = deployed_store
    target = tmp_path / "out" / "kscout_kernels"
    target.mkdir(parents=True)
    (target / "mine.txt").write_text("keep me")
    with Store.open(home) as store:
        with pytest.raises(ExportError, match="already exists; pass --force"):
            export_package(store, tmp_path / "out")
        assert (target / "mine.txt").read_text() == "keep me"
        export_package(store, tmp_path / "out", force=True)
    assert not (target / "mine.txt").exists() and (target / "layernorm.py").is_file()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["kscout_kernels"]  # no staging left


def test_export_with_nothing_deployed_is_a_clear_error(tmp_path):
    with Store.open(tmp_path / "store") as store, pytest.raises(ExportError, match="nothing is deployed"):
        export_package(store, tmp_path / "out")


def test_export_refuses_a_reference_that_changed_since_promotion(tmp_path, cpu_problem):
    with Store.open(tmp_path / "store") as store:
        run = make_run(store, cpu_problem, evaluation.fingerprint("cpu"))
        c = add_candidate(store, run, variant(1))
        write_deployment(
            store,
            cpu_problem.model_copy(update={"source_sha256": "0" * 64}),
            c,
            evaluation.fingerprint("cpu"),
        )
        with pytest.raises(ExportError, match="the reference of layernorm changed since"):
            export_package(store, tmp_path / "out")
    assert not (tmp_path / "out" / "kscout_kernels").exists()


def test_export_cli_takes_a_package_name_and_prints_one_json_object(tmp_path, deployed_store, capsys):
    home, seed_id = deployed_store
    main(["export", str(tmp_path / "out"), "--name", "my_kernels", "--store", str(home), "--json"])
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["package"] == "my_kernels"
    assert manifest["ops"]["layernorm"]["kernels"]["cpu"]["candidate_id"] == seed_id
    assert (tmp_path / "out" / "my_kernels" / "__init__.py").is_file()


def test_export_rejects_a_name_that_is_not_a_python_package(tmp_path, deployed_store):
    home, _ = deployed_store
    with Store.open(home) as store, pytest.raises(ExportError, match="not a valid Python package name"):
        export_package(store, tmp_path / "out", name="my-kernels")
