"""How many trials may run: decided in one place.

=========  ==============================================================================
plan       slots, rungs and worst-case cost, before anything runs (pure)
admission  the start rule: plan, share and deadline -> start, wait or done
ledger     the cluster's ledger of sweeps and their fair shares
=========  ==============================================================================
"""
