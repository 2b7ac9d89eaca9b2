"""Collaborative publishing across custodians (seed 004): secure aggregation of marginals, and more to come."""
