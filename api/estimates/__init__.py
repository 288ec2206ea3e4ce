"""Estimates: ranked plans for a spec before it is submitted, and the feasibility rules that
admission shares."""
