"""WHEN to call the mid drafter: policies, tree signals, and the scheduler's training pipeline.

`policies` and `signals` are what the decoder needs online; `collect`, `value` and `distill`
are training code and are never imported by the online adaptive policy.
"""
