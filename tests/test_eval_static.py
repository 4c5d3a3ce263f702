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


# Weight initialisation copied from nn.Linear.reset_parameters: the fan/gain helpers of torch.nn.init
# are pure arithmetic on a tensor's shape, so they may run where the weights are made, and only there.
LINEAR_INIT = """import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


class ModelNew(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        self.bias = nn.Parameter(torch.empty(n_out))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return x
"""


def _private(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.detail) for f in check_source(source).findings if f.rule == "PrivateAPI"]


@pytest.mark.parametrize(
    "source",
    [
        LINEAR_INIT,
        # in __init__ itself, through each spelling of the name
        HEADER.replace(
            "    pass\n",
            "    def __init__(self, w):\n"
            "        super().__init__()\n"
            "        fan = torch.nn.init._calculate_correct_fan(w, 'fan_in')\n"
            "        gain = torch.nn.init.calculate_gain('leaky_relu', 5 ** 0.5)\n"
            "        fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(w)\n",
        ),
        "import torch\nfrom torch.nn.init import _calculate_fan_in_and_fan_out as fans\n"
        "from torch.nn import init\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def __init__(self, w):\n"
        "        super().__init__()\n"
        "        a, b = fans(w)\n"
        "        c = init._calculate_correct_fan(w, 'fan_out')\n",
        # a helper method that only __init__ calls, which calls another one
        LINEAR_INIT.replace(
            "        nn.init.kaiming_uniform_", "        self.init_bias()\n        nn.init.kaiming_uniform_"
        )
        + "\n    def init_bias(self):\n        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)\n",
    ],
    ids=["linear_reset_parameters", "in_init", "imported_names", "helper_of_a_helper"],
)
def test_init_fan_and_gain_helpers_are_allowed_where_the_weights_are_made(source):
    assert check_source(source).findings == ()


@pytest.mark.parametrize(
    "source, expected",
    [
        (  # in forward
            LINEAR_INIT.replace(
                "        return x\n", "        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(x)\n        return x\n"
            ),
            [(22, "use of torch.nn.init._calculate_fan_in_and_fan_out outside __init__")],
        ),
        (  # reset_parameters is also called from forward, so it runs there too
            LINEAR_INIT.replace("        return x\n", "        self.reset_parameters()\n        return x\n"),
            [(17, "use of torch.nn.init._calculate_fan_in_and_fan_out outside __init__")],
        ),
        (  # at module level
            HEADER + "f = torch.nn.init._calculate_correct_fan(torch.ones(2, 2), 'fan_in')\n",
            [(6, "use of torch.nn.init._calculate_correct_fan outside __init__")],
        ),
        (  # an imported name used in forward
            "import torch\nfrom torch.nn.init import _calculate_fan_in_and_fan_out as fans\n"
            "class ModelNew(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        return fans(x)\n",
            [(5, "use of torch.nn.init._calculate_fan_in_and_fan_out outside __init__")],
        ),
        (  # kept in __init__ (not called there) for forward to call later
            HEADER.replace(
                "    pass\n",
                "    def __init__(self):\n"
                "        super().__init__()\n"
                "        self.fans = torch.nn.init._calculate_fan_in_and_fan_out\n"
                "    def forward(self, x):\n"
                "        return self.fans(x)\n",
            ),
            [(7, "use of torch.nn.init._calculate_fan_in_and_fan_out outside __init__")],
        ),
        (  # a lambda made in __init__ runs whenever it is called
            HEADER.replace(
                "    pass\n",
                "    def __init__(self):\n"
                "        super().__init__()\n"
                "        self.fans = lambda w: torch.nn.init._calculate_fan_in_and_fan_out(w)\n",
            ),
            [(7, "use of torch.nn.init._calculate_fan_in_and_fan_out outside __init__")],
        ),
        (  # nn.Module calls train() from eval(): a method of that name is not init-only
            HEADER.replace(
                "    pass\n",
                "    def __init__(self):\n"
                "        super().__init__()\n"
                "        self.train()\n"
                "    def train(self, mode=True):\n"
                "        torch.nn.init._calculate_correct_fan(self.w, 'fan_in')\n"
                "        return self\n",
            ),
            [(9, "use of torch.nn.init._calculate_correct_fan outside __init__")],
        ),
        (  # every other private name stays refused in __init__ too
            HEADER.replace(
                "    pass\n",
                "    def __init__(self):\n        super().__init__()\n        torch._C._set_grad_enabled(False)\n",
            ),
            [(7, "use of torch._C._set_grad_enabled"), (7, "use of torch._C")],
        ),
    ],
    ids=[
        "in_forward",
        "method_also_called_from_forward",
        "module_level",
        "imported_name_in_forward",
        "stored_in_init_called_in_forward",
        "lambda_made_in_init",
        "module_method_name",
        "other_private_names_in_init",
    ],
)
def test_init_fan_helpers_stay_private_api_everywhere_else(source, expected):
    assert _private(source) == expected
