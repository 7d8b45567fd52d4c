"""Workloads that exist for the benchmarks only (a held-out table for the replay, #38)."""
