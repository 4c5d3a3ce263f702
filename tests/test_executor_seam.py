"""The executor is the only way agent code runs candidate code: proven by reading the agent's source.

The search, the final re-measure and `revalidate` reach the evaluator through an executor
(agent/search/executors/); nothing else in agent/ may call `evaluation.evaluate`, `remeasure`,
`time_many` or `fingerprint`, nor import the harness.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent.search.executors import EXECUTORS, ExecutorError, LocalExecutor, make_executor

AGENT = Path(__file__).resolve().parents[1] / "agent"
EXECUTORS_DIR = AGENT / "search" / "executors"
RUNS_CANDIDATES = {"evaluate", "remeasure", "time_many", "fingerprint"}
HARNESS_MODULES = {"evaluation.harness", "evaluation.fingerprint", "evaluation.worker", "evaluation.isolation"}


def reaches_the_evaluator(path: Path, text: str | None = None) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text, filename=str(path))):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if (
            isinstance(node, ast.Attribute)
            and node.attr in RUNS_CANDIDATES
            and isinstance(node.value, ast.Name)
            and node.value.id == "evaluation"
        ):
            found.append(f"{where} evaluation.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "evaluation":
            found += [f"{where} from evaluation import {a.name}" for a in node.names if a.name in RUNS_CANDIDATES]
        elif isinstance(node, ast.ImportFrom) and node.module in HARNESS_MODULES:
            found.append(f"{where} from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"{where} import {a.name}" for a in node.names if a.name in HARNESS_MODULES]
    return found


def test_no_agent_module_outside_the_executors_runs_candidate_code():
    files = [p for p in AGENT.rglob("*.py") if EXECUTORS_DIR not in p.parents]
    assert len(files) > 20  # the scan sees the whole agent package
    assert [hit for p in files for hit in reaches_the_evaluator(p)] == []


def test_the_scan_sees_every_way_of_reaching_the_evaluator():
    text = (
        "import evaluation\nimport evaluation.harness\nfrom evaluation import fingerprint, load_problem\n"
        "from evaluation.harness import remeasure\nevaluation.evaluate('x', p)\nevaluation.load_problem('x')\n"
    )
    assert reaches_the_evaluator(Path("bad.py"), text) == [
        "bad.py:2 import evaluation.harness",
        "bad.py:3 from evaluation import fingerprint",
        "bad.py:4 from evaluation.harness import ...",
        "bad.py:5 evaluation.evaluate",
    ]


def test_executors_come_from_one_table_by_name():
    assert list(EXECUTORS) == ["local", "ray"]
    with make_executor("local", device="cpu", workers=2) as ex:
        assert isinstance(ex, LocalExecutor) and (ex.name, ex.device, ex.workers) == ("local", "cpu", 2)
        assert ex.environment().device_kind == "cpu"
    with pytest.raises(ExecutorError, match="unknown executor 'slurm'; use one of: local, ray"):
        make_executor("slurm")
    with pytest.raises(ExecutorError, match="need --executor ray"):
        make_executor("local", device="cpu", ray_address="127.0.0.1:6379")


def test_an_unknown_executor_is_refused_before_any_run(tmp_path, capsys):
    from agent.cli import main
    from store import Store

    with pytest.raises(SystemExit) as done:
        main(["optimize", "layernorm", "--device", "cpu", "--executor", "slurm", "--store", str(tmp_path)])
    assert done.value.code == 2
    assert "--executor must be one of: local, ray (got 'slurm')" in capsys.readouterr().err
    with Store.open(tmp_path) as st:
        assert st.list_runs() == []
