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
