"""The meta-solver: a sliding-window AUC bandit choosing among search techniques."""

from autotune.bandit.auc import AUCBandit

__all__ = ["AUCBandit"]
