"""The static check: each named rule fires on what it names, through aliases, and not on honest code."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.static_check import RULES, check_source

SEEDS = sorted((Path(__file__).parent.parent / "evaluation" / "seeds").glob("[!_]*.py"))
HEADER = "import torch\nimport triton\nimport triton.language as tl\nclass ModelNew(torch.nn.Module):\n    pass\n"


def _rules(body: str, problem_module: str | None = None) -> list[str]:
    return [f.rule for f in check_source(HEADER + body, problem_module).findings]


@pytest.mark.parametrize("seed", SEEDS, ids=[p.stem for p in SEEDS])
def test_every_builtin_seed_passes_the_static_check(seed):
    report = check_source(seed.read_text())
    assert report.syntax_error is None and report.has_model_new and report.findings == ()


@pytest.mark.parametrize(
    "body,rule",
    [
        ("import subprocess\n", "ForbiddenImport"),
        ("from multiprocessing import Pool\n", "ForbiddenImport"),
        ("import ctypes as c\n", "ForbiddenImport"),
        ("from concurrent.futures import ThreadPoolExecutor\n", "ForbiddenImport"),
        ("import importlib\nm = importlib.import_module('socket')\n", "ForbiddenImport"),
        ("t = __import__('threading')\n", "ForbiddenImport"),
        ("s = torch.cuda.Stream()\n", "CudaStream"),
        ("import torch.cuda as tc\ns = tc.Stream()\n", "CudaStream"),
        ("from torch.cuda import stream\n", "CudaStream"),
        ("C = torch.cuda\nwith C.stream(None):\n    pass\n", "CudaStream"),
        ("torch.cuda.set_stream(None)\n", "CudaStream"),
        ("torch.allclose = lambda *a, **k: True\n", "MonkeyPatch"),
        ("import torch as T\nT.cuda.Event.elapsed_time = lambda *a: 0.0\n", "MonkeyPatch"),
        ("import time\ntime.perf_counter = lambda: 0.0\n", "MonkeyPatch"),
        ("setattr(torch, 'equal', lambda *a: True)\n", "MonkeyPatch"),
        ("setattr(getattr(torch, 'testing'), 'assert_close', None)\n", "MonkeyPatch"),
        ("vars(torch)['allclose'] = None\n", "MonkeyPatch"),
        ("import numpy as np\nnp.allclose = None\n", "MonkeyPatch"),
        ("import sys\nsys.modules['torch'] = None\n", "MonkeyPatch"),
        ("torch.Tensor.__sub__ = None\n", "MonkeyPatch"),
        ("del torch.isfinite\n", "MonkeyPatch"),
        ("from evaluation.problems.layernorm import Model\n", "HarnessImport"),
        ("import evaluation.worker\n", "HarnessImport"),
        ("from mymodels import Model\n", "HarnessImport"),
        ("import layernorm\n", "HarnessImport"),
        ("import sys\nf = sys._getframe(1)\n", "FrameIntrospection"),
        ("import inspect\nf = inspect.currentframe().f_back\n", "FrameIntrospection"),
        ("from torch.utils._python_dispatch import _disable_current_modes\n", "DispatchEscape"),
        ("g = torch._C._DisableTorchDispatch()\n", "DispatchEscape"),
        ("import os\nos.system('true')\n", "ProcessSpawn"),
        ("from os import fork\n", "ProcessSpawn"),
        ("import os\nos.setsid()\n", "ProcessSpawn"),
    ],
)
def test_rule_fires_on_what_it_names(body, rule):
    assert rule in _rules(body, problem_module="layernorm")


@pytest.mark.parametrize(
    "body",
    [
        "import os\nos.kill(os.getpid(), 9)\n",  # isolation must prove itself on these, not the syntax check
        "import os\nos._exit(0)\n",
        "import sys\nsys.exit(1)\n",
        "x = torch.stack([torch.ones(1)])\n",
        "self_stream = None\nclass K:\n    stream = 1\n",
        "import math\ny = math.sqrt(2.0)\n",
        "class ModelNew2(torch.nn.Module):\n    def forward(self, x):\n        self.cache = x\n        return x\n",
        "import os\nn = os.environ.get('WORLD_SIZE')\n",
    ],
)
def test_honest_or_isolation_tested_code_is_not_flagged(body):
    assert _rules(body, problem_module="layernorm") == []


def test_syntax_error_and_missing_model_new_are_reported_not_flagged():
    broken = check_source("def f(:\n")
    assert broken.syntax_error.startswith("line 1:") and broken.findings == ()
    missing = check_source("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    assert missing.syntax_error is None and not missing.has_model_new


def test_model_new_may_be_bound_by_assignment_or_import():
    assert check_source("from x import Impl\nModelNew = Impl\n").has_model_new
    assert check_source("from impls import Fast as ModelNew\n").has_model_new


def test_every_finding_names_its_line_and_a_known_rule():
    report = check_source(HEADER + "\n\nimport subprocess\ntorch.allclose = None\n")
    assert [(f.rule, f.line) for f in report.findings] == [("ForbiddenImport", 8), ("MonkeyPatch", 9)]
    assert all(f.rule in RULES and f.describe().startswith(f"line {f.line}: ") for f in report.findings)
