"""Usage: spend, savings, lost work and budgets, computed from the attempts ledger."""
