"""The tree policy: which node to expand next, and how.

The rule (documented here because every decision stores its reason):

- A node's value is log(speedup vs eager) of the best passing node in its subtree (itself included).
- Measured trees: flat UCT over passing nodes,
  score(n) = value(n) - failure_penalty * failures(n) / visits(n) + exploration * sqrt(ln N / visits(n)),
  visits(n) counting evaluated nodes in the subtree (itself included), failures(n) the failed ones,
  N all evaluated nodes; ties go to the node that itself holds the value, then the oldest.
- Unmeasured trees (the CPU, where the Triton interpreter times nothing): every pass is worth log(1)
  = 0 and UCT's exploration term alone would walk a chain (a new leaf always has the fewest visits).
  The rule degenerates to breadth instead: expand the shallowest passing node that has fewer than
  `breadth` children, fewest failures in its subtree first, then the oldest. Breadth spends an
  unmeasured budget on proving many different configurations correct rather than one long walk.
- In order: no node yet -> `seed`; the newest node failed and the proposer can repair and the lineage
  has been repaired fewer than `max_repairs` times -> `repair` it; `restart_after` evaluations since
  the last improvement or restart -> `restart`; no passing node left whose last
  `branch_failure_limit` children did not all fail -> `restart`; else the chosen node is refined, or a
  `sibling` is asked for (a new child that makes a different kind of change than its earlier
  children) when its last `sibling_after` passing children did not beat it (always, in breadth mode,
  once it has a child).

Restarted candidates are new roots, so a branch's failures never penalise the seed's branch.
The policy is a pure function of the tree: resuming a session rebuilds the same decisions.
"""

from __future__ import annotations

import math
from typing import Optional

from agent import Frozen
from agent.proposers.base import Action

_FAILED = frozenset({"compile_error", "incorrect", "rejected", "crashed", "timed_out"})


_Frozen = Frozen


class Node(_Frozen):
    candidate_id: str
    parent_id: Optional[str] = None
    status: Optional[str] = None  # None: written but not evaluated yet
    speedup: Optional[float] = None  # measured geometric-mean speedup vs eager; None where untimed
    action: str = "seed"

    @property
    def evaluated(self) -> bool:
        return self.status is not None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status in _FAILED

    @property
    def own_value(self) -> float:
        """log(speedup) of this node alone (0 when passed but untimed); -inf when it did not pass."""
        if not self.passed:
            return -math.inf
        return math.log(self.speedup) if self.speedup else 0.0


class PolicyConfig(_Frozen):
    exploration: float = 0.5
    failure_penalty: float = 0.5
    branch_failure_limit: int = 3
    sibling_after: int = 2
    restart_after: int = 8
    max_repairs: int = 2
    allow_repair: bool = False
    breadth: int = 3


class Decision(_Frozen):
    action: Action
    node_id: Optional[str]  # the node the action is about (None for seed and restart)
    reason: str


class Tree:
    """Evaluation-ordered nodes with the subtree statistics the rule needs."""

    def __init__(self, nodes: list[Node]):
        self.nodes = list(nodes)
        self.by_id = {n.candidate_id: n for n in self.nodes}
        self.children: dict[str, list[Node]] = {n.candidate_id: [] for n in self.nodes}
        for n in self.nodes:
            if n.parent_id in self.children:
                self.children[n.parent_id].append(n)

    def subtree(self, node_id: str) -> list[Node]:
        out, stack = [], [self.by_id[node_id]]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(self.children[n.candidate_id])
        return out

    @property
    def evaluated(self) -> list[Node]:
        return [n for n in self.nodes if n.evaluated]

    def visits(self, node_id: str) -> int:
        return sum(1 for n in self.subtree(node_id) if n.evaluated)

    def failures(self, node_id: str) -> int:
        return sum(1 for n in self.subtree(node_id) if n.failed)

    def value(self, node_id: str) -> float:
        return max(n.own_value for n in self.subtree(node_id))

    def score(self, node_id: str, config: PolicyConfig) -> float:
        visits = max(self.visits(node_id), 1)
        total = max(len(self.evaluated), 1)
        return (
            self.value(node_id)
            - config.failure_penalty * self.failures(node_id) / visits
            + config.exploration * math.sqrt(math.log(total) / visits)
        )

    def trailing_failed_children(self, node_id: str) -> int:
        run = 0
        for child in reversed([c for c in self.children[node_id] if c.evaluated]):
            if not child.failed:
                break
            run += 1
        return run

    def stale_children(self, node_id: str) -> int:
        """Passing children since the last one that beat this node (all of them when untimed)."""
        base = self.by_id[node_id].own_value
        run = 0
        for child in reversed([c for c in self.children[node_id] if c.passed]):
            if child.own_value > base:
                break
            run += 1
        return run

    def depth(self, node_id: str) -> int:
        depth, node = 0, self.by_id[node_id]
        while node.parent_id in self.by_id:
            depth, node = depth + 1, self.by_id[node.parent_id]
        return depth

    def evaluated_children(self, node_id: str) -> int:
        return sum(1 for c in self.children[node_id] if c.evaluated)

    @property
    def measured(self) -> bool:
        return any(n.passed and n.speedup is not None for n in self.nodes)

    def repair_depth(self, node_id: str) -> int:
        """How many repairs in a row led to this node (its own action included)."""
        depth, node = 0, self.by_id.get(node_id)
        while node is not None and node.action == Action.repair.value:
            depth += 1
            node = self.by_id.get(node.parent_id) if node.parent_id else None
        return depth

    def since_progress(self) -> int:
        """Evaluations since the last improvement of the best value, or the last restart."""
        best, since = -math.inf, 0
        for n in self.evaluated:
            if n.action == Action.restart.value or (n.passed and n.own_value > best):
                since = 0
            else:
                since += 1
            if n.passed:
                best = max(best, n.own_value)
        return since


def decide(tree: Tree, config: PolicyConfig = PolicyConfig()) -> Decision:
    """The next action, with the reason that is stored beside the candidates it produces."""
    evaluated = tree.evaluated
    if not evaluated:
        return Decision(action=Action.seed, node_id=None, reason="no candidate evaluated yet")

    newest = evaluated[-1]
    if config.allow_repair and newest.failed:
        depth = tree.repair_depth(newest.candidate_id)
        if depth < config.max_repairs:
            return Decision(
                action=Action.repair,
                node_id=newest.candidate_id,
                reason=f"newest candidate {newest.candidate_id[:12]} is {newest.status}; "
                f"repair {depth + 1} of {config.max_repairs} in this lineage",
            )

    since = tree.since_progress()
    if since >= config.restart_after:
        return Decision(
            action=Action.restart,
            node_id=None,
            reason=f"stalled: {since} evaluations since the last improvement or restart "
            f"(restart_after={config.restart_after})",
        )

    passing = [n for n in evaluated if n.passed]
    eligible = [n for n in passing if tree.trailing_failed_children(n.candidate_id) < config.branch_failure_limit]
    if not eligible:
        why = (
            "no candidate has passed yet"
            if not passing
            else f"every passing node's last {config.branch_failure_limit} children failed"
        )
        return Decision(action=Action.restart, node_id=None, reason=why)

    order = {n.candidate_id: i for i, n in enumerate(tree.nodes)}
    if not tree.measured:
        return _breadth(tree, eligible, order, config)
    scores = {n.candidate_id: tree.score(n.candidate_id, config) for n in eligible}
    # Ties: the node that itself holds the value (not an ancestor sharing it), then the oldest.
    best = max(eligible, key=lambda n: (scores[n.candidate_id], n.own_value, -order[n.candidate_id]))
    cid = best.candidate_id
    stats = (
        f"score {scores[cid]:.3f} (value {tree.value(cid):.3f}, {tree.visits(cid)} visits, "
        f"{tree.failures(cid)} failures) best of {len(eligible)} passing nodes"
    )
    stale = tree.stale_children(cid)
    if stale >= config.sibling_after:
        return Decision(
            action=Action.sibling,
            node_id=cid,
            reason=f"{cid[:12]}: {stats}; its last {stale} passing children did not beat it, "
            f"so try a different kind of change than they made",
        )
    return Decision(action=Action.refine, node_id=cid, reason=f"refine {cid[:12]}: {stats}")


def _breadth(tree: Tree, eligible: list[Node], order: dict[str, int], config: PolicyConfig) -> Decision:
    def key(n: Node):
        cid = n.candidate_id
        full = tree.evaluated_children(cid) >= config.breadth
        return (full, tree.depth(cid), tree.failures(cid), order[cid])

    best = min(eligible, key=key)
    cid = best.candidate_id
    kids = tree.evaluated_children(cid)
    why = (
        f"nothing is timed here, so breadth: {cid[:12]} is the shallowest passing node (depth "
        f"{tree.depth(cid)}) with {kids} of {config.breadth} children and {tree.failures(cid)} failures"
    )
    if kids:
        return Decision(
            action=Action.sibling,
            node_id=cid,
            reason=f"{why}; ask for a different kind of change than its children made",
        )
    return Decision(action=Action.refine, node_id=cid, reason=why)
