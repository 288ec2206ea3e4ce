"""Prices and risks of GPU capacity: the offer catalog, preemption priors and the cost model."""
