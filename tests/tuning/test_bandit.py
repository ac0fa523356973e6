"""Tests for the sliding-window AUC bandit, with values computed by hand."""

import math

import pytest

from autotune.tuning.bandit import AUCBandit


def test_untried_techniques_first_in_order():
    b = AUCBandit(["grid", "pbt", "bayes"], window=10)
    order = []
    for _ in range(3):
        t = b.select()
        order.append(t)
        b.credit(t, False)
    assert order == ["grid", "pbt", "bayes"]


def test_auc_and_exploration_by_hand():
    b = AUCBandit(["a", "b"], window=4, C=0.2)
    b.credit("a", False)
    b.credit("b", True)
    b.credit("a", True)
    # a's uses, oldest first: pos 1 fail, pos 2 success -> area 2,
    # normalised by n(n+1)/2 = 3 -> AUC_a = 2/3
    assert b.auc("a") == pytest.approx(2 / 3)
    # b: one use, a success -> 1 / 1 = 1
    assert b.auc("b") == pytest.approx(1.0)
    # |H| = 3: lg 3 = 1.5849625; a: sqrt(2*1.5849625/2) = 1.2589530
    assert b.exploration("a") == pytest.approx(1.2589530, rel=1e-6)
    # b: sqrt(2*1.5849625/1) = 1.7804283
    assert b.exploration("b") == pytest.approx(1.7804283, rel=1e-6)
    # scores: a = 0.6666667 + 0.2*1.2589530 = 0.9184573; b = 1 + 0.2*1.7804283 = 1.3560857
    assert b.score("a") == pytest.approx(0.9184573, rel=1e-6)
    assert b.score("b") == pytest.approx(1.3560857, rel=1e-6)
    assert b.select() == "b"


def test_recent_successes_weigh_more():
    b = AUCBandit(["x", "y"], window=10, C=0.0)
    b.credit("x", True)   # x: success at pos 1 of 2 -> area 1 -> 1/3
    b.credit("y", False)  # y: success at pos 2 of 2 -> area 2 -> 2/3
    b.credit("x", False)
    b.credit("y", True)
    assert b.auc("x") == pytest.approx(1 / 3)
    assert b.auc("y") == pytest.approx(2 / 3)
    assert b.select() == "y"


def test_window_slides():
    b = AUCBandit(["a", "b"], window=3, C=0.2)
    b.credit("a", True)
    b.credit("b", False)
    b.credit("a", False)
    assert b.auc("a") == pytest.approx(1 / 3)  # success at pos 1 of 2 -> 1/3
    b.credit("b", False)  # pushes the first use (a's success) out of the window
    assert list(b.history) == [("b", False), ("a", False), ("b", False)]
    assert b.uses == {"a": 1, "b": 2}
    assert b.auc("a") == 0.0
    # both AUCs are 0; exploration: |H| = 3, a: sqrt(2*1.5849625/1) = 1.7804283,
    # b: sqrt(2*1.5849625/2) = 1.2589530, so the less used a is chosen
    assert b.exploration("a") == pytest.approx(1.7804283, rel=1e-6)
    assert b.select() == "a"
    # a technique pushed out of the window entirely counts as untried again
    b2 = AUCBandit(["a", "b"], window=2)
    b2.credit("a", True)
    b2.credit("b", True)
    b2.credit("b", True)
    assert b2.uses["a"] == 0 and math.isinf(b2.exploration("a"))
    assert b2.select() == "a"


def test_single_use_window_has_no_exploration_bonus():
    b = AUCBandit(["a", "b"], window=1, C=0.2)
    b.credit("a", False)
    assert b.exploration("a") == 0.0  # lg|H| = lg 1 = 0
    assert b.select() == "b"  # b is untried (infinite bonus)


def test_ties_go_to_the_earlier_technique_and_available_restricts():
    b = AUCBandit(["a", "b", "c"], window=10)
    for t in "abc":
        b.credit(t, False)
    assert b.select() == "a"
    assert b.select(["c", "b"]) == "c"


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="at least one"):
        AUCBandit([])
    with pytest.raises(ValueError, match="repeated"):
        AUCBandit(["a", "a"])
    with pytest.raises(ValueError, match="window"):
        AUCBandit(["a"], window=0)
    b = AUCBandit(["a"])
    with pytest.raises(KeyError, match="unknown technique 'z'"):
        b.credit("z", True)
    with pytest.raises(ValueError, match="no technique"):
        b.select([])
