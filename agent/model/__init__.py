"""Optimize a model, not an op (`kscout optimize-model MODEL.py`, issue 26).

    graph.py       the model's forward as the lowering captures it (one aten graph), run on real tensors
    partition.py   the graph cut into regions: a contraction with its epilogue, chains between contractions,
                   and reference regions the lowering does not take
    attention.py   a hand-written attention's regions made one, F.scaled_dot_product_attention in canonical form
    profile.py     torch.profiler after warm-up: the eager model's time and each region's share
    extract.py     each region as a KernelBench problem file with the shapes and dtypes of the real run
    assemble.py    one ModelNew from the regions' winning kernels, dispatched as `kscout export` does
    flow.py        the whole flow: profile, partition, extract, search (optimize-many), assemble, judge
    records.py     what the flow reports (regions table, verdicts)
    keep.py        the assembled model in the store: one run and one candidate, promotable and revalidated as one
    page.py        the model view: time-share bars before and after, by region (HTML, and in `kscout report`)
    cli.py         the `optimize-model` command

Profiling, partitioning, assembly and the judges run on a CPU (Triton's interpreter); speed is
measured only on a GPU.
"""

from __future__ import annotations

from evaluation.errors import KscoutError


class ModelError(KscoutError):
    """A model file the flow cannot take (not KernelBench format, a forward that does not trace)."""
