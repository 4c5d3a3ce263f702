"""Graph capture for the lowering: symbolic sizes, module settings as symbols bound to the module's
attributes, Python numbers as kernel arguments, and the reference's __init__ copied for ModelNew."""

import textwrap

import pytest
import sympy
from lowering_cases import CASES, assert_close, run_lowered

from agent.proposers.lowering import LoweringError, lower_source
from agent.proposers.lowering.capture import capture, init_source


def test_equal_sizes_stay_distinct_symbols():
    src = CASES["softmax_dim1"].replace("torch.randn(3, 41, 5)", "torch.randn(8, 8, 8)")
    low = lower_source(src, "/tmp/square.py")
    (x,) = [b for b in low.program.buffers.values() if b.kind == "input"]
    assert len({s for s in x.shape}) == 3 and all(isinstance(s, sympy.Symbol) for s in x.shape)


def test_pooling_settings_are_symbols_bound_to_the_module_attributes():
    low = lower_source(CASES["maxpool1d"], "/tmp/maxpool1d.py")
    bound = set(low.program.bindings.values())
    for attr in ("kernel_size", "stride", "padding", "dilation"):
        assert any(f"self.p.{attr}" in b for b in bound), (attr, bound)
    assert low.program.checks == []  # nothing fixed by the trace


def test_a_group_count_is_a_symbol_bound_to_num_groups():
    low = lower_source(CASES["group_norm"], "/tmp/group_norm.py")
    assert any(b == "int(self.gn.num_groups) + 2" for b in low.program.bindings.values())


def test_a_python_number_input_is_passed_to_the_kernel_not_baked_in():
    src, _, _, _ = run_lowered(CASES["pointwise_broadcast"], path="/tmp/pointwise_broadcast.py")
    other = CASES["pointwise_broadcast"].replace(", 0.25]", ", -3.5]")
    assert other != CASES["pointwise_broadcast"]
    _, out, expected, flagged = run_lowered(other, candidate=src, path="/tmp/pointwise_broadcast.py")
    assert flagged == {}
    assert_close(out, expected)
    assert "0.25" not in src


def test_init_is_copied_with_its_defaults_and_without_its_docstring():
    src = textwrap.dedent('''
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, n: int, eps: float = 1e-5, *, scale=2.0):
                """Docs that the candidate need not repeat."""
                super(Model, self).__init__()
                self.fc = nn.Linear(n, n)
                self.eps = eps * scale

            def forward(self, x):
                return self.fc(x) * self.eps
        ''')
    init = init_source(src)
    assert init.signature == "self, n: int, eps: float=1e-05, *, scale=2.0"
    assert "Docs" not in init.body and "super().__init__()" in init.body
    assert "self.fc = nn.Linear(n, n)" in init.body


def test_an_init_that_reads_a_module_level_size_constant_gets_it_mirrored_and_an_expression_is_refused():
    src = CASES["softmax_dim1"].replace(
        "super().__init__()", "super().__init__()\n        self.w = nn.Parameter(torch.randn(N))"
    )
    init = init_source("N = 4\n" + src)
    assert init.helpers == ("N = 4",)  # the worker rebinds it per case, as in the problem's module
    assert "self.w = nn.Parameter(torch.randn(N))" in init.body
    assert init_source("N = 2\nN = 4\n" + src).helpers == ("N = 4",)  # the last assignment counts
    with pytest.raises(LoweringError, match="module-level value 'N', which is not a plain int constant"):
        capture("N = 2 * 2\n" + src, "/tmp/global_n.py")


def test_a_trace_swaps_functional_pooling_only_in_its_own_thread():
    """Searches in threads lower while others run references: the swap must not leak to them."""
    import threading

    import torch
    import torch.nn.functional as F

    from agent.proposers.lowering.capture import _patched

    original = F.max_pool2d
    x = torch.randn(1, 2, 6, 6)
    seen = {}

    def other_thread():
        seen["fn"] = F.max_pool2d.__wrapped__ if hasattr(F.max_pool2d, "__wrapped__") else F.max_pool2d
        seen["out"] = F.max_pool2d(x, 2)

    with _patched(torch.nn.Identity(), [], lambda: ()):
        assert F.max_pool2d is not original  # swapped for the trace
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert F.max_pool2d is original  # put back
    assert seen["fn"] is original and torch.equal(seen["out"], original(x, 2))  # the other thread computed with PyTorch


ITEM_IN_INIT = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, n):
            super().__init__()
            # Swin's stochastic depth schedule: values read back in __init__, which no meta tensor holds
            rates = [x.item() for x in torch.linspace(0, 0.5, 3)]
            self.scale = rates[-1] + 1.0
            self.fc = nn.Linear(n, n)

        def forward(self, x):
            return torch.relu(self.fc(x)) * self.scale

    def get_inputs():
        return [torch.randn(4, 6)]

    def get_init_inputs():
        return [6]
    """)


def test_a_model_whose_init_reads_values_back_is_built_on_the_host_and_lowered_exactly():
    import torch

    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    captured = capture(ITEM_IN_INIT, "/tmp/item_in_init.py")
    assert [(p.kind, p.name) for p in captured.placeholders] == [
        ("param", "fc.weight"),
        ("param", "fc.bias"),
        ("input", "x"),
    ]
    assert torch.equal(torch.random.get_rng_state(), before)  # the host build drew from a forked RNG
    src, out, expected, flagged = run_lowered(ITEM_IN_INIT, path="/tmp/item_in_init.py")
    assert flagged == {}
    assert_close(out, expected)


def test_a_model_that_cannot_be_built_anywhere_names_both_failures():
    broken = ITEM_IN_INIT.replace(
        "self.fc = nn.Linear(n, n)", "self.fc = nn.Linear(n, n)\n        raise ValueError('no')"
    )
    with pytest.raises(LoweringError) as raised:
        capture(broken, "/tmp/broken_init.py")
    message = str(raised.value)
    assert "broken_init.py: cannot build the reference on the meta device (RuntimeError: " in message
    assert "item() cannot be called on meta tensors) nor on the host (ValueError: no)" in message
