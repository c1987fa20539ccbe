"""WHEN to call the mid drafter, online: the policies, the tree signals, the scheduler artifact's
loader and the adaptive policy. Training the scheduler is offline code: `treegraft_lab.training`.
"""
