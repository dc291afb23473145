"""``aieflow.pareto.undominated``: the one Pareto filter (the search's fronts, the recurrent
spreads, the plot's step line, the sweeps), checked against a brute-force definition."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from aieflow.pareto import undominated


def brute_force(keys: list[tuple]) -> list[int]:
    """The indices kept by the definition: not beaten or equalled everywhere by another item, of
    equal items the first; ordered by the figures, ties in input order."""

    def beaten(i: int) -> bool:
        for j, k in enumerate(keys):
            if j == i:
                continue
            at_most = all(a <= b for a, b in zip(k, keys[i], strict=True))
            if at_most and (k != keys[i] or j < i):
                return True
        return False

    return sorted((i for i in range(len(keys)) if not beaten(i)), key=lambda i: (keys[i], i))


figures = st.integers(1, 6).flatmap(
    lambda d: st.lists(st.tuples(*[st.sampled_from([0, 1, 2, 2.5, 3, 7]) for _ in range(d)]), max_size=40))


@settings(max_examples=300, deadline=None)
@given(figures)
def test_undominated_is_the_brute_force_front(keys):
    items = list(enumerate(keys))  # (index, figures): which equal item survives is visible
    got = [i for i, _ in undominated(items, key=lambda it: it[1])]
    assert got == brute_force(keys)


def test_a_grid_and_its_known_front():
    # every (tiles, latency, interval) on a grid: only the all-smallest corner survives, plus the
    # points that trade one figure against another
    grid = list(itertools.product(range(1, 4), range(3), range(3, 0, -1)))
    extra = [(2, 0.5, 0.5), (2, 0.5, 0.5), (1, 5, 0.1)]  # a duplicate, and a point best in one figure
    kept = undominated(grid + extra, key=lambda p: p)
    assert kept == [(1, 0, 1), (1, 5, 0.1), (2, 0.5, 0.5)]


def test_the_search_fronts_use_it():
    # the three hand-written copies (passes.search._prune, recurrent.select._undominated and the
    # plot's _staircase) are gone: the search, the recurrent pruning and the plot import this one
    import aieflow.pareto_plot as plot
    import aieflow.passes.search as search
    import aieflow.recurrent.select as select

    for module in (search, select, plot):
        assert module.undominated is undominated
    assert not hasattr(search, "_prune") and not hasattr(select, "_undominated") and not hasattr(plot, "_staircase")
