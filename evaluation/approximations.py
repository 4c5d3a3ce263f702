"""Known approximations a candidate may use where the reference is exact, and how a verdict reports them.

The decision (issue 17): an approximation is a different function, so the strict policy does not widen
its tolerance for one. What changes is the report: a candidate that computes tanh-approximate GELU for
the reference's exact GELU, and whose every failing case is off by no more than the approximation
itself deviates from the exact function (plus the tolerance), is labelled `Approximation` instead of a
bare value mismatch, with the bound, and told that `--tolerance kernelbench` (1e-2) admits it. Under a
policy that passes it, the result still lists the approximation, so nobody takes it for exact.

Detection needs both sides: the reference must use the exact function (`F.gelu(x)`, `nn.GELU()`,
without approximate="tanh"), and the candidate's source must carry the approximation's signature (the
constant 0.044715 or sqrt(2/pi) = 0.79788456 of the tanh form; 1.702 of the sigmoid form). The error
magnitude check keeps a wrong kernel that merely mentions the constant from being excused.

`annotate(result, candidate_source, problem)` is the one call the harness makes on every result it
returns: it records the tolerance policy that judged the result and labels approximations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evaluation.records import EvalResult, ProblemInfo, Status


@dataclass(frozen=True)
class Approximation:
    name: str  # "tanh-GELU for exact GELU"
    max_abs_deviation: float  # sup over x of |approximate(x) - exact(x)|


TANH_GELU = Approximation("tanh-GELU for exact GELU", 4.74e-4)  # 4.7324e-4 at x = 2.699, measured in float64
SIGMOID_GELU = Approximation("sigmoid-GELU (x * sigmoid(1.702 x)) for exact GELU", 2.04e-2)

_EXACT_GELU = re.compile(r"\bgelu\s*\((?![^)]*approximate\s*=\s*['\"]tanh)[^)]*\)|\bGELU\s*\((?![^)]*tanh)[^)]*\)")
_TANH_FORM = re.compile(r"0\.044715|0\.797884|sqrt\(\s*2(\.0)?\s*/\s*(math\.|np\.)?pi|approximate\s*=\s*['\"]tanh")
_SIGMOID_FORM = re.compile(r"\b1\.702\b")
_VALUE_FAILURES = {"ValueMismatch", "NormError"}


def detect(candidate_source: str, reference_source: str) -> tuple[Approximation, ...]:
    """The known approximations the candidate's source uses where the reference's is exact."""
    if not _EXACT_GELU.search(reference_source):
        return ()
    found = []
    if _TANH_FORM.search(candidate_source):
        found.append(TANH_GELU)
    if _SIGMOID_FORM.search(candidate_source):
        found.append(SIGMOID_GELU)
    return tuple(found)


def annotate(result: EvalResult, candidate_source: str, problem: ProblemInfo) -> EvalResult:
    """The result as the harness returns it: the policy that judged it, and its approximations."""
    if result.tolerance_policy != problem.tolerance_policy:
        result = result.model_copy(update={"tolerance_policy": problem.tolerance_policy})
    return label(result, candidate_source, problem)


def label(result: EvalResult, candidate_source: str, problem: ProblemInfo) -> EvalResult:
    """The result with its approximations listed, and a value failure that the approximation accounts for
    labelled as such (the status stays what the policy decided)."""
    found = detect(candidate_source, problem.source)
    if not found:
        return result
    names = tuple(f"{a.name} (deviates by up to {a.max_abs_deviation:.2g})" for a in found)
    update: dict = {"approximations": names}
    if result.status is Status.incorrect and result.error_class in _VALUE_FAILURES:
        failing = [r for r in result.shape_results if not r.passed]
        bound = max(a.max_abs_deviation for a in found)
        if failing and all(r.max_abs_error is not None and r.max_abs_error <= bound + r.atol for r in failing):
            worst = max(r.max_abs_error for r in failing)
            update["error_class"] = "Approximation"
            update["message"] = (
                f"the candidate computes {found[0].name}: its largest error {worst:.3g} is within "
                f"that approximation's own deviation ({bound:.2g}) plus the tolerance, but the "
                f"{problem.tolerance_policy} policy asks for the exact function; "
                f"--tolerance kernelbench (1e-2) admits it. {result.message or ''}"
            ).strip()
    return result.model_copy(update=update)
