"""The tree policy on hand-built trees: the numbers of the rule, then the decisions it makes."""

import math

import pytest

from agent.proposers.base import Action
from agent.search.policy import Node, PolicyConfig, Tree, decide


def n(cid, parent=None, status="passed", speedup=None, action="refine"):
    return Node(candidate_id=cid, parent_id=parent, status=status, speedup=speedup, action=action)


def measured_tree():
    # seed (1.0x) -> a (1.5x) -> a1 (2.0x), a2 (incorrect); seed -> b (0.8x)
    return Tree(
        [
            n("seed", speedup=1.0, action="seed"),
            n("a", "seed", speedup=1.5),
            n("b", "seed", speedup=0.8),
            n("a1", "a", speedup=2.0),
            n("a2", "a", status="incorrect"),
        ]
    )


def test_node_value_is_log_speedup_of_best_descendant():
    t = measured_tree()
    assert t.value("seed") == pytest.approx(math.log(2.0))
    assert t.value("a") == pytest.approx(math.log(2.0))
    assert t.value("b") == pytest.approx(math.log(0.8))
    assert t.value("a2") == -math.inf


def test_visits_and_failures_count_the_evaluated_subtree():
    t = measured_tree()
    assert (t.visits("seed"), t.failures("seed")) == (5, 1)
    assert (t.visits("a"), t.failures("a")) == (3, 1)
    assert (t.visits("a1"), t.failures("a1")) == (1, 0)


def test_score_is_value_minus_failure_penalty_plus_exploration():
    t, cfg = measured_tree(), PolicyConfig(exploration=0.5, failure_penalty=0.5)
    expected_a = math.log(2.0) - 0.5 * 1 / 3 + 0.5 * math.sqrt(math.log(5) / 3)
    expected_a1 = math.log(2.0) + 0.5 * math.sqrt(math.log(5) / 1)
    assert t.score("a", cfg) == pytest.approx(expected_a)
    assert t.score("a1", cfg) == pytest.approx(expected_a1)


def test_refines_the_fastest_leaf_when_measured():
    d = decide(measured_tree(), PolicyConfig(exploration=0.5))
    assert (d.action, d.node_id) == (Action.refine, "a1")
    assert d.reason.startswith("refine a1")


def test_empty_tree_asks_for_a_seed():
    d = decide(Tree([]))
    assert (d.action, d.node_id) == (Action.seed, None)


def test_unmeasured_tree_degenerates_to_breadth():
    # CPU: every pass is worth 0; the shallowest passing node with fewer than `breadth` children is expanded.
    t = Tree([n("seed", action="seed"), n("a", "seed"), n("b", "seed"), n("a1", "a")])
    assert [t.value(c) for c in ("seed", "a", "b", "a1")] == [0.0, 0.0, 0.0, 0.0]
    d = decide(t, PolicyConfig(breadth=3))
    assert (d.action, d.node_id) == (Action.sibling, "seed")  # it has children: a different change
    assert "2 of 3 children" in d.reason
    full = Tree(t.nodes + [n("c", "seed")])
    d = decide(full, PolicyConfig(breadth=3))
    assert (d.action, d.node_id) == (Action.sibling, "a")  # depth 1, oldest; a already has a child
    d = decide(Tree([n("seed", action="seed")]), PolicyConfig())
    assert (d.action, d.node_id) == (Action.refine, "seed")


def test_breadth_prefers_the_branch_with_fewer_failures():
    t = Tree(
        [n("seed", action="seed"), n("a", "seed"), n("b", "seed"), n("c", "seed"), n("af", "a", status="incorrect")]
    )
    d = decide(t, PolicyConfig(breadth=3, restart_after=99))
    assert d.node_id == "b"  # a, b, c are at depth 1; a has a failure; b is older than c


def test_failures_push_uct_away_from_a_branch():
    # Two leaves with the same measured value and one visit each, but x has a failed child.
    t = Tree(
        [
            n("x", speedup=1.2, action="seed"),
            n("y", speedup=1.2, action="restart"),
            n("xf", "x", status="compile_error"),
        ]
    )
    cfg = PolicyConfig()
    assert t.score("x", cfg) < t.score("y", cfg)
    assert decide(t, cfg).node_id == "y"


def test_restarts_when_no_candidate_has_passed_and_repair_is_off():
    t = Tree([n("s", status="compile_error", action="seed")])
    d = decide(t, PolicyConfig(allow_repair=False))
    assert (d.action, d.node_id) == (Action.restart, None)
    assert d.reason == "no candidate has passed yet"


def test_repairs_the_newest_failure_up_to_the_limit():
    cfg = PolicyConfig(allow_repair=True, max_repairs=2)
    t1 = Tree([n("s", status="incorrect", action="seed")])
    assert (decide(t1, cfg).action, decide(t1, cfg).node_id) == (Action.repair, "s")
    t2 = Tree([n("s", status="incorrect", action="seed"), n("r1", "s", status="compile_error", action="repair")])
    assert (decide(t2, cfg).action, decide(t2, cfg).node_id) == (Action.repair, "r1")
    t3 = Tree(
        [
            n("s", status="incorrect", action="seed"),
            n("r1", "s", status="compile_error", action="repair"),
            n("r2", "r1", status="crashed", action="repair"),
        ]
    )
    assert t3.repair_depth("r2") == 2
    assert decide(t3, cfg).action is Action.restart


def test_restarts_when_every_passing_branch_keeps_failing():
    kids = [n(f"f{i}", "s", status="compile_error") for i in range(3)]
    t = Tree([n("s", action="seed")] + kids)
    assert t.trailing_failed_children("s") == 3
    d = decide(t, PolicyConfig(branch_failure_limit=3, restart_after=99))
    assert d.action is Action.restart
    assert "last 3 children failed" in d.reason


def test_a_pass_after_failures_reopens_the_branch():
    t = Tree(
        [
            n("s", action="seed"),
            n("f1", "s", status="incorrect"),
            n("f2", "s", status="incorrect"),
            n("f3", "s", status="incorrect"),
            n("ok", "s"),
        ]
    )
    assert t.trailing_failed_children("s") == 0
    assert decide(t, PolicyConfig(branch_failure_limit=3, restart_after=99)).action is Action.refine


def test_stall_triggers_a_restart_and_the_restart_resets_the_count():
    nodes = [n("s", speedup=1.2, action="seed")] + [n(f"c{i}", "s", speedup=1.0) for i in range(4)]
    t = Tree(nodes)
    assert t.since_progress() == 4
    d = decide(t, PolicyConfig(restart_after=4))
    assert d.action is Action.restart and "4 evaluations" in d.reason
    t2 = Tree(nodes + [n("r", None, speedup=0.9, action="restart")])
    assert t2.since_progress() == 0


def test_tries_a_sibling_when_refinements_stop_beating_the_node():
    # a beat its parent, then two children of a did not beat a: ask for a different kind of change from a.
    t = Tree(
        [
            n("s", speedup=1.0, action="seed"),
            n("a", "s", speedup=1.4),
            n("a1", "a", speedup=1.1),
            n("a2", "a", speedup=1.2),
        ]
    )
    cfg = PolicyConfig(exploration=0.0, sibling_after=2, restart_after=99)
    assert t.stale_children("a") == 2
    d = decide(t, cfg)
    assert (d.action, d.node_id) == (Action.sibling, "a")
    assert "different kind of change" in d.reason


def test_depth_follows_parents_and_a_restart_is_a_new_root():
    t = Tree([n("s", action="seed"), n("a", "s"), n("a1", "a"), n("r", None, action="restart")])
    assert [t.depth(c) for c in ("s", "a", "a1", "r")] == [0, 1, 2, 0]


def test_pending_nodes_do_not_count_as_visits():
    t = Tree([n("s", action="seed"), n("p", "s", status=None)])
    assert t.visits("s") == 1
    assert len(t.evaluated) == 1
