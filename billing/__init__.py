"""Metering and cost: rates, usage records, budgets."""
