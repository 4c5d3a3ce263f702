"""A region keeps its reference ops when its best timed kernel is slower than them (issue 26: a kernel
may only make the model faster; falling below what the user already has is a bug)."""

from __future__ import annotations

from agent.model.flow import reference_is_faster
from agent.search.summary import Across, KernelView, Ratio, Verdict


def _kernel(ratio: float, low: float, high: float) -> KernelView:
    r = Ratio(ratio=ratio, low=low, high=high)
    verdict = Verdict(
        numbers_from="remeasure",
        across=(Across(baseline="eager", geomean=r, worst=r, worst_case_id="c", cases=2),),
    )
    return KernelView(candidate_id="k", proposer="template", picked=True, status="passed", verdict=verdict)


def test_a_kernel_slower_than_the_reference_ops_is_not_taken_and_the_reason_gives_its_numbers():
    why = reference_is_faster(_kernel(0.8, 0.75, 0.86))
    assert why == "kept the reference ops: its best kernel was 0.80x eager [0.75, 0.86] over 2 timed case(s)"


def test_a_kernel_at_or_above_the_reference_is_taken_and_an_untimed_one_is_not_judged_here():
    assert reference_is_faster(_kernel(1.0, 0.97, 1.03)) is None
    assert reference_is_faster(_kernel(1.4, 1.3, 1.5)) is None
    untimed = KernelView(candidate_id="k", proposer="template", picked=False, status="passed", verdict=None)
    assert reference_is_faster(untimed) is None


def test_a_search_that_picked_nothing_says_how_far_its_fastest_passing_kernel_stayed():
    """minGPT's attention region on an H100: 6 passed and none was picked, with no number to say why."""
    from types import SimpleNamespace

    from agent.model.flow import no_kernel_reason

    untimed = KernelView(candidate_id="u", proposer="template", picked=False, status="passed", verdict=None)
    s = SimpleNamespace(
        evaluations=6,
        passed=6,
        failures=(),
        stop_reason="evaluation_budget",
        kernels=(_kernel(0.41, 0.40, 0.42), untimed, _kernel(0.62, 0.60, 0.63)),
    )
    assert no_kernel_reason(s) == (
        "kept the reference ops: no passing kernel was picked (6 evaluated, 6 passed; the fastest 0.62x eager "
        "[0.60, 0.63]); stopped: evaluation_budget"
    )
    s.kernels = (untimed,)  # nothing timed (a CPU): no number is made up
    assert no_kernel_reason(s) == (
        "kept the reference ops: no passing kernel was picked (6 evaluated, 6 passed); stopped: evaluation_budget"
    )
