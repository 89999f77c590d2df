"""Reward functions for RL rollouts: the scorers (reward service, benchmarks) and spec checks (gateway, preprocess)."""

from shared.rewards.base import RewardFunction, RewardUnavailable, RuleFunction, Sample, Score
from shared.rewards.functions import default_functions, triton_url_of
from shared.rewards.spec import Scored, SpecItem, check_spec, items_from_proto, score_group, score_keys

__all__ = [
    "RewardFunction",
    "RewardUnavailable",
    "RuleFunction",
    "Sample",
    "Score",
    "Scored",
    "SpecItem",
    "check_spec",
    "default_functions",
    "items_from_proto",
    "score_group",
    "score_keys",
    "triton_url_of",
]
