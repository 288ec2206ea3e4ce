"""Teams: who owns jobs, tokens and budgets. Created by the operator (admin CLI or admin API)."""
