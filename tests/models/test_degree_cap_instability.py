"""Why the package ships no degree cap for node-level DP (README, "Node level"): a cap that decides
which of a node's edges survive from its other edges is not node-stable. Greedy capping in a fixed
public order (the projection of Day, Li and Lyu, SIGMOD 2016) on a path, D = 1: removing the first
node flips every edge, so the capped graphs differ in all of them and a sum aggregation's change
is not bounded by any function of D."""
import torch


def greedy_cap(edges: list[tuple[int, int]], num_nodes: int, D: int) -> set[tuple[int, int]]:
    degree = [0] * num_nodes
    kept = set()
    for u, v in edges:  # the public order
        if degree[u] < D and degree[v] < D:
            kept.add((u, v))
            degree[u] += 1
            degree[v] += 1
    return kept


def test_greedy_cap_cascades_along_a_path():
    n = 41
    path = [(i, i + 1) for i in range(n - 1)]
    with_first = greedy_cap(path, n, D=1)
    without_first = greedy_cap(path[1:], n, D=1)  # node 0 removed with its edge
    changed = with_first ^ without_first
    assert len(changed) == n - 1  # every edge flips: the change grows with the graph, not with D
    # the sum aggregation of unit rows changes on every node of the path
    x = torch.eye(n)

    def aggregate(kept):
        out = torch.zeros(n, n)
        for u, v in kept:
            out[u] += x[v]
            out[v] += x[u]
        return out

    rows_changed = (aggregate(with_first) - aggregate(without_first)).abs().sum(dim=1) > 0
    assert int(rows_changed.sum()) == n
