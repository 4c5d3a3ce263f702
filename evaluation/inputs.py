"""Trial inputs, made the same way in the parent and in the worker, and memory poisoning.

Inputs never cross the process boundary on the way in: both sides call the problem's get_inputs()
after `torch.manual_seed(seed)`, apply the trial's rescale (`x * scale + shift`, stated in the
request) and cast floating tensors to the case dtype. On a GPU, get_inputs() runs with the GPU as
the default device, so its random tensors come from the device's (deterministic, counter-based) generator: the CPU generator is serial and took tens
of seconds per LLM-sized case (a 8192 x 128256 logits tensor is a billion draws). Both sides draw on
the same device kind, so the bits match. Integer and bool inputs (targets, indices, masks) keep their
dtype and values.

Trial 0 uses get_inputs() as it is; later trials shift and scale floating inputs so that a kernel which
gets the variance or an offset wrong, or answers "all tiny", fails somewhere. Stress trials (planned by
the parent, correctness.py) push magnitudes and offsets as far as PyTorch itself stays right.
"""

from __future__ import annotations

import threading
from typing import Any

RNG_LOCK = threading.RLock()  # held from torch.manual_seed to the last draw it is meant for

# (scale, shift) for inputs with both signs; inputs that are never negative only get the scale, since
# a shift could leave the problem's domain (probabilities, lengths).
_TRANSFORMS = ((1.0, 0.0), (4.0, 1.5), (0.01, 0.0))


def transform(trial: int) -> tuple[float, float]:
    if trial == 0:
        return _TRANSFORMS[0]
    return _TRANSFORMS[1 + (trial - 1) % (len(_TRANSFORMS) - 1)]


def describe(scale: float, shift: float, label: str = "") -> str:
    if scale == 1.0 and shift == 0.0:
        return "get_inputs() as is"
    text = f"floating inputs x*{scale:g}" + (f"+{shift:g} (when signed)" if shift else "")
    return f"{label}: {text}" if label in STRESS_LADDERS else text


def describe_trial(trial: int) -> str:
    return describe(*transform(trial))


# Stress trials (issue 10): magnitudes and offsets where naive softmax, logsumexp or one-pass
# variance break, tried from the top down; the parent keeps the largest at which PyTorch's own
# implementation, run in the case dtype, still passes the comparison (correctness.plan_stress).
STRESS_LADDERS = {
    "large_logits": (1e4, 1e3, 1e2, 10.0),  # x * s: |x| up to ~4e4, near float16's limit of 65504
    "large_offset": (1e4, 1e3, 1e2, 10.0),  # x + s: exp(x) overflows in every float dtype at 1e4
    # x * -s for inputs that are never negative (torch.rand): the other trials keep their sign, so a
    # running max that starts at 0 or a wrong negative slope would never show (issue 17's corpus);
    # planned only where such an input exists and the reference stays finite on it (not a log's domain).
    "negated": (-1e2, -10.0, -1.0),
    # x * s for inputs that are never negative: a naive exp or logsumexp over torch.rand logits (or a
    # mean loss over them) overflows only once they are large, which the signed kinds never make them.
    "magnified": (1e4, 1e3, 1e2, 10.0),
}
SCALING_KINDS = ("large_logits", "negated", "magnified")  # the kinds whose value is the scale


def make_inputs(
    module,
    dtype: str,
    seed: int,
    trial: int,
    device: str,
    *,
    scale: float | None = None,
    shift: float | None = None,
    stress: bool = False,
    kind: str | None = None,
) -> list[Any]:
    """Trial `trial`'s inputs (its rescale from `transform`), or an explicit `scale`/`shift`
    (`kind`: the stress kind, which says which inputs it restates)."""
    import torch

    with RNG_LOCK:  # seeding is global: two judging threads of one parent must not interleave their draws
        torch.manual_seed(seed)
        if device == "cpu":
            raw = module.get_inputs()
        else:
            with torch.device(device):
                raw = module.get_inputs()
    if scale is None or shift is None:
        scale, shift = transform(trial)
    target = getattr(torch, dtype)
    out = []
    for x in raw:
        if isinstance(x, torch.Tensor):
            x = x.detach()
            if x.is_floating_point():
                if (scale != 1.0 or shift != 0.0) and restates(x, scale, stress, kind):
                    x = _rescaled(x, scale, shift, target)
                x = x.to(target)
            x = x.to(device)
        out.append(x)
    return out


def trial_inputs(module, dtype: str, trial, device: str) -> list[Any]:
    """The inputs of a `protocol.Trial` (seed, scale, shift, stress): the one recipe of both sides."""
    kind = trial.label if trial.stress else None
    return make_inputs(
        module, dtype, trial.seed, 0, device, scale=trial.scale, shift=trial.shift, stress=trial.stress, kind=kind
    )


def _signed(x) -> bool:
    return bool((x < 0).any()) and bool((x > 0).any())


def restates(x, scale: float, stress: bool, kind: str | None = None) -> bool:
    """Whether a trial's rescale applies to the floating input `x`. Regular trials rescale every input;
    stress trials that magnify (scale > 0) only inputs with both signs, the magnified kind only inputs
    that are never negative, and the negated stress trial (scale < 0) only inputs that are never
    negative, where the other trials never reach a negative value."""
    if not stress:
        return True
    if scale < 0 or kind == "magnified":
        return not bool((x < 0).any())
    return _signed(x)


def _rescaled(x, scale: float, shift: float, target):
    """x * scale (+ shift when x has both signs), in float32 for every target narrower than float64.

    One float32 copy, scaled in place. The float64 temporaries this used to make took several times
    the tensor (over 30 GB at the peak of one 8192 x 128256 logits draw), and a parent judging several
    candidates next to their workers ran out of an H200's memory. Narrow targets lose nothing: the
    float32 result is rounded to bf16/fp16 anyway, and for float32 x * 4 + 1.5 is exact up to that one
    rounding either way (x * 0.01 may differ in the last bit: other inputs, the same test)."""
    import torch

    signed = _signed(x)
    y = x.to(torch.float64 if target == torch.float64 else torch.float32, copy=True)  # never the caller's tensor
    y.mul_(scale)
    if signed and shift:
        y.add_(shift)
    return y


def poison_memory(device: str, inputs: list[Any]) -> None:
    """Fill memory that the next allocations will reuse with 0xFF bytes (NaN in every float dtype).

    An output the candidate allocates with torch.empty and does not fully write then reads NaN (or -1
    for integers) instead of a lucky zero or a previous answer. Blocks are sized like the inputs (an
    output is usually the size of an input, and allocators reuse a freed block of the same size), plus
    on cuda every free block the caching allocator holds. On the CPU this is best effort: glibc serves
    large allocations from fresh (zeroed) mmaps, small ones from the freed heap.
    """
    import torch

    sizes = [t.nbytes for t in inputs if isinstance(t, torch.Tensor) and t.nbytes] * 2
    sizes.append(max(2 * sum(sizes), 1 << 16))
    if device == "cuda":
        for segment in torch.cuda.memory_snapshot():
            sizes += [b["size"] for b in segment.get("blocks", ()) if b.get("state") == "inactive"]
        held = []
        for size in sorted(sizes, reverse=True):
            try:
                held.append(torch.empty(size, dtype=torch.uint8, device="cuda").fill_(255))
            except torch.OutOfMemoryError:
                break
        torch.cuda.synchronize()
        del held
        return
    # Twice: the first large free raises glibc's mmap threshold, so the second lands on the heap.
    for _ in range(2):
        held = [torch.empty(n, dtype=torch.uint8).fill_(255) for n in sizes + [1 << 16, 1 << 20]]
        del held
