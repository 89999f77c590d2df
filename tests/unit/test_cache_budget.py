"""The error budget's threshold math (services/cache/budget.py): pure, no Milvus."""

from __future__ import annotations

import pytest

from services.cache.budget import BudgetBook, EntryStats, Threshold, bin_of, threshold, wilson

FLOOR, TENANT_FLOOR, TARGET = 0.80, 0.85, 0.01


def outcomes(*runs: tuple[float, bool, int]) -> EntryStats:
    """`count` outcomes at `similarity`, each correct or wrong."""
    s = EntryStats()
    for similarity, correct, count in runs:
        for _ in range(count):
            s = s.add(similarity, correct)
    return s


def test_no_evidence_is_the_tenants_floor() -> None:
    t = threshold(EntryStats(), TENANT_FLOOR, FLOOR, TARGET)
    assert t == Threshold(TENANT_FLOOR) and not t.learned
    assert t.accepts(0.85) and not t.accepts(0.8499)
    # the same float comparison as before the budget, for floors of any precision
    assert threshold(EntryStats(), 0.8123, FLOOR, TARGET).accepts(0.8123)
    assert not threshold(EntryStats(), 0.8123, FLOOR, TARGET).accepts(0.81229)


@pytest.mark.parametrize("s", [0.873, 0.29 + 0.6, 0.9, 0.999, 0.85])
def test_a_wrong_reuse_lifts_the_threshold_above_its_similarity(s: float) -> None:
    t = threshold(outcomes((s, False, 1)), TENANT_FLOOR, FLOOR, TARGET)
    assert t.learned and t.value > s
    assert not t.accepts(s)  # the same similarity is no longer served for this entry
    assert t.accepts(min(1.0, s + 0.002)) or s + 0.002 > 1.0


def test_a_wrong_reuse_above_some_correct_ones_still_lifts_it() -> None:
    t = threshold(outcomes((0.86, True, 5), (0.91, False, 1)), TENANT_FLOOR, FLOOR, TARGET)
    assert not t.accepts(0.91) and not t.accepts(0.86) and t.accepts(0.912)


def test_a_wrong_reuse_below_the_floor_changes_nothing_above_it() -> None:
    t = threshold(outcomes((0.82, False, 1)), TENANT_FLOOR, FLOOR, TARGET)
    assert t.accepts(0.85) and not t.accepts(0.849)


def test_bin_edges_survive_float_rounding() -> None:
    assert bin_of(0.29) == 290 and bin_of(0.8799999) == 879 and bin_of(1.0) == 1000


def test_many_correct_reuses_relax_it_but_never_below_the_global_floor() -> None:
    few = threshold(outcomes((0.82, True, 20)), 0.9, FLOOR, TARGET)
    assert not few.accepts(0.82) and few.accepts(0.9)  # 20 clean checks do not prove 1%
    many = threshold(outcomes((0.82, True, 1000)), 0.9, FLOOR, TARGET)
    assert many.accepts(0.82) and many.accepts(0.87) and not many.accepts(0.8199)
    below = threshold(outcomes((0.7, True, 5000)), 0.9, FLOOR, TARGET)  # outcomes under the floor
    assert not below.accepts(0.79) and not below.accepts(0.7) and below.accepts(0.9)


def test_enough_correct_reuses_outweigh_a_rare_wrong_one() -> None:
    """The budget bounds the error rate, it does not forbid errors: one wrong in a thousand
    checks is within 1% with 95% confidence."""
    t = threshold(outcomes((0.86, True, 1000), (0.95, False, 1)), 0.9, FLOOR, TARGET)
    assert t.accepts(0.95) and t.accepts(0.86)
    t = threshold(outcomes((0.86, True, 100), (0.95, False, 1)), 0.9, FLOOR, TARGET)
    assert not t.accepts(0.95) and not t.accepts(0.86)


def test_the_tenants_target_decides() -> None:
    seen = outcomes((0.86, True, 100))
    assert threshold(seen, 0.9, FLOOR, 0.05).accepts(0.86)  # upper bound 3.7% <= 5%
    assert not threshold(seen, 0.9, FLOOR, 0.01).accepts(0.86)
    wrong = outcomes((0.86, True, 100), (0.87, False, 2))
    assert not threshold(wrong, 0.9, FLOOR, 0.05).accepts(0.86)  # 2 in 102: the upper end is 6.9%
    assert threshold(wrong, 0.9, FLOOR, 0.10).accepts(0.86)


def test_wilson_interval() -> None:
    assert wilson(0, 0) == (0.0, 0.0, 1.0)
    est, lo, hi = wilson(1, 10)
    assert est == 0.1 and lo == pytest.approx(0.0179, abs=1e-4) and hi == pytest.approx(0.4042, abs=1e-4)
    assert wilson(0, 1000)[2] == pytest.approx(0.00383, abs=1e-5)


def test_stats_encode_and_book() -> None:
    s = outcomes((0.91, True, 3), (0.873, False, 1))
    assert s.encode() == "910:3:0,873:0:1" and EntryStats.decode(s.encode()) == s and s.n == 4
    assert EntryStats.decode("junk") == EntryStats() == EntryStats.decode("1:2")
    book = BudgetBook(capacity=2)
    assert book.view("a", s.encode()) == s  # nothing here: Milvus' copy
    more = s.add(0.9, True)
    book.put("a", more)
    assert book.view("a", s.encode()) == more  # this replica's newer copy
    assert book.view("a", more.add(0.9, True).encode()).n == 6  # another replica's newer one
    book.put("b", s)
    book.put("c", s)
    assert len(book) == 2 and book.view("a") == EntryStats()
