"""Team budgets: a monthly cap per team, what it has spent this month, and what is left."""
