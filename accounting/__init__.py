"""Privacy accounting: guarantee records, budget splits, amplification bounds."""

from shuffledp.accounting.budget import level_budgets, start_level
from shuffledp.accounting.guarantee import Guarantee

__all__ = ["Guarantee", "level_budgets", "start_level"]
