"""Everything offline, never imported by the decoder or by `import treegraft_lab`.

collect          trajectories: every schedule replayed from sampled round starts (the decoder's
                 round API), priced by a device profile
value            the value system f_theta and the scheduler's inputs and labels
distill          margin distillation into the online MLP g_psi, and its replay scores
grouped_cv       grouped cross-validation, ridge, R^2 and permutation importance (scikit-learn),
                 shared with the workbench
drafter_distill  the pocket drafter's self-distillation from the target
drafter_card     the pocket drafter's measurements and model card
"""
