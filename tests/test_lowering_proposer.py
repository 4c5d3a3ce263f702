"""The template proposer on references no hand-written family matches: lowered candidates for every
action, schedule moves among the search moves, one line for what cannot be lowered, and the families
still preferred where they match."""

import os
import textwrap
from pathlib import Path

import pytest
from lowering_cases import CASES, problem_info

from agent.proposers.base import Action, ParentInfo, ProposeRequest
from agent.proposers.lowering.propose import is_lowering_config
from agent.proposers.template import TemplateProposer
from evaluation.records import ProblemInfo, source_sha256


def _problem(tmp_path, name: str, source: str) -> ProblemInfo:
    return problem_info(tmp_path, name, source, {"N": 8})


def _request(problem, action=Action.seed, parent=None, n=1, seen=frozenset(), rng_seed=0):
    return ProposeRequest(
        problem=problem,
        device="cpu",
        arch="cpu",
        device_name="cpu",
        action=action,
        parent=parent,
        n=n,
        seen_sha256=seen,
        rng_seed=rng_seed,
    )


def _parent(p) -> ParentInfo:
    return ParentInfo(
        candidate_id=source_sha256(p.source), source=p.source, knobs=p.knobs, transformation_tags=p.transformation_tags
    )


def test_seed_is_the_lowered_default_schedule_with_its_kinds_on_record(tmp_path):
    problem = _problem(tmp_path, "gemm_groupnorm", CASES["gemm_groupnorm"])
    result = TemplateProposer().propose(_request(problem, n=3))
    assert result.errors == ()
    first = result.proposals[0]
    assert is_lowering_config(first.knobs)
    assert [g["kind"] for g in first.knobs["groups"]] == ["matmul", "row", "pointwise"]
    assert first.template_name == "lowering/matmul+row+pointwise.j2" and len(first.template_sha256) == 64
    assert "schedule=matmul+row+pointwise" in first.transformation_tags
    assert "default schedule" in first.rationale and "N=8" in first.rationale
    assert len({p.source for p in result.proposals}) == 3


def test_every_action_gives_unseen_sources_and_refine_ends_exhausted(tmp_path):
    problem = _problem(tmp_path, "softmax_dim1", CASES["softmax_dim1"])
    proposer = TemplateProposer()
    seed = proposer.propose(_request(problem)).proposals[0]
    seen = {source_sha256(seed.source)}
    for action in (Action.refine, Action.sibling, Action.restart):
        result = proposer.propose(_request(problem, action, _parent(seed), n=2, seen=frozenset(seen)))
        assert len(result.proposals) == 2, action
        for p in result.proposals:
            assert source_sha256(p.source) not in seen
            assert p.parent_id == source_sha256(seed.source)
            seen.add(source_sha256(p.source))
    everything = proposer.propose(_request(problem, Action.refine, _parent(seed), n=10_000, seen=frozenset(seen)))
    assert everything.errors and everything.errors[0].kind == "exhausted"
    assert len(everything.proposals) > 10


def test_schedule_moves_split_and_merge_fusion_groups(tmp_path):
    problem = _problem(tmp_path, "group_norm_gemm", CASES["gemm_groupnorm"])
    proposer = TemplateProposer()
    seed = proposer.propose(_request(problem)).proposals[0]
    moves = proposer.propose(_request(problem, Action.sibling, _parent(seed), n=60)).proposals
    split = [p for p in moves if any(t.startswith("fuse.") for t in p.transformation_tags)]
    assert split, [p.transformation_tags for p in moves]
    unfused = next(p for p in split if "fuse.rows=false" in p.transformation_tags)
    assert len(unfused.knobs["groups"]) > len(seed.knobs["groups"])
    assert unfused.source.count("@triton.jit") > seed.source.count("@triton.jit")


def test_a_reference_with_ops_no_schedule_covers_gets_one_line_naming_them(tmp_path):
    source = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.ConvTranspose2d(3, 4, 3)

            def forward(self, x):
                y = self.conv(x)
                return torch.sort(y, dim=-1)[0] + torch.topk(y, 2, dim=-1)[0].sum()

        def get_inputs():
            return [torch.randn(1, 3, 8, 8)]

        def get_init_inputs():
            return []
        """)
    result = TemplateProposer().propose(_request(_problem(tmp_path, "kb_convt", source)))
    assert result.proposals == ()
    err = result.errors[0]
    assert err.kind == "unsupported"
    assert "no schedule lowers sort, topk;" in err.message  # the transposed convolution itself lowers
    assert "schedules known: pointwise, reduction" in err.message and "\n" not in err.message


def test_a_reference_that_matches_a_family_still_gets_the_family_template():
    import evaluation

    problem = evaluation.load_problem("layernorm", "cpu")
    p = TemplateProposer().propose(_request(problem)).proposals[0]
    assert p.template_name == "rowwise.j2" and not is_lowering_config(p.knobs)


DEV = Path(
    os.environ.get("KSCOUT_KERNELBENCH_DEV", Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench-dev")
)


@pytest.mark.slow  # the lowering of a symbolic 3D transposed convolution: about 30 s here
@pytest.mark.skipif(not DEV.is_dir(), reason="needs ../shared/kernelbench-dev")
def test_a_symbolic_transposed_3d_convolution_prints_candidates_python_can_parse():
    """Its sizes are polynomials in the shape symbols; expanded, one buffer offset ran to 4,901 terms
    and no candidate parsed (RecursionError). Factored, every line stays short."""
    import ast

    import evaluation
    from agent.proposers.lowering import lower_source
    from agent.proposers.lowering.propose import LoweringSearch

    path = DEV / "level2" / "26_ConvTranspose3d_Add_HardSwish.py"
    info = evaluation.load_problem(str(path), "cuda")
    search = LoweringSearch(lower_source(path.read_text(), str(path)))
    request = ProposeRequest(problem=info, device="cuda", arch="sm_90", device_name="H200", action=Action.seed, n=2)
    sources = [p.source for p in search.propose(request).proposals]
    assert sources
    for source in sources:
        ast.parse(source)
        assert max(len(line) for line in source.splitlines()) < 5_000
