"""How much of the per-round oracle's gain the scheduler's inputs can predict, with a stronger
learner than g_psi: gradient-boosted trees, no value model between, cross-validated by prompt.

    .venv/bin/python scripts/signal_ceiling.py \\
        --trajectories data/trajectories/smollm2-pocket-a100-topk-lookup-known-95/trajectories.parquet \\
        --json data/scheduler/smollm2-pocket/family-topk-lookup/ceiling.json

Every decision point of the trajectories (a round start, a draft step k and the decisions before
it) is labelled with its replay margin (`distill.replay_margins`: the best realised tokens/ms
among the round start's schedules that call now minus among those that skip). Learners from
scikit-learn see the student's inputs with all ten signals: a HistGradientBoostingRegressor
regresses the margin in tokens per ms or in ms per token (`distill.worth`; call iff the
prediction > a threshold, in label standard deviations), and a HistGradientBoostingClassifier
learns its sign with each point weighted by |margin| in tokens per ms (what a wrong decision
there costs; call iff P(call pays) > a threshold). On each held-out fold of
prompts (GroupKFold) the rule is followed down each round start's replayed schedules
(`distill.replay_policy`) and scored as `train-scheduler` scores its student
(`distill.throughput`, modelled tokens/s on the trajectories' own profile), beside all-small and
the oracle (the best schedule of each round in hindsight).
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.model_selection import GroupKFold

from treegraft_lab.models import cpu_name
from treegraft_lab.schedule.signals import SIGNALS
from treegraft_lab.training.distill import (
    canonical_states,
    oracle_rounds,
    replay_margins,
    replay_policy,
    throughput,
)
from treegraft_lab.training.value import student_inputs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trajectories", type=Path, required=True)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    df = pd.read_parquet(args.trajectories)
    D = int(df["D"].iloc[0])
    states = canonical_states(df)
    y = replay_margins(df, states, D)
    y_pt = replay_margins(df, states, D, "ms-per-token")
    x = student_inputs(states, SIGNALS, D)
    first = df[df["k"] == 1]
    base = {"all-small": throughput(first[first["schedule"] == "0" * D]),
            "oracle": throughput(oracle_rounds(first, ["state"]))}
    groups = states["qid"].to_numpy()
    folds = list(GroupKFold(args.folds).split(x, groups=groups))
    trees = {"max_depth": 3, "learning_rate": 0.05, "max_iter": 300, "min_samples_leaf": 50, "random_state": 0}

    def regressor(tr):
        m = HistGradientBoostingRegressor(**trees).fit(x[tr], y[tr])
        return lambda z: m.predict(z) / y.std()

    def regressor_pt(tr):
        m = HistGradientBoostingRegressor(**trees).fit(x[tr], y_pt[tr])
        return lambda z: m.predict(z) / y_pt.std()

    def classifier(tr):
        m = HistGradientBoostingClassifier(**trees).fit(x[tr], (y[tr] > 0).astype(int), sample_weight=abs(y[tr]) + 1e-12)
        return lambda z: m.predict_proba(z)[:, 1]

    res = {}
    held = [df[df["qid"].isin(set(groups[te]))] for _, te in folds]
    for name, fit, cuts in [("regression, margin (std) >", regressor, (-0.05, 0.0, 0.05)),
                            ("regression in ms per token, margin (std) >", regressor_pt, (-0.05, 0.0, 0.05)),
                            ("weighted classifier, P(call pays) >", classifier, (0.5, 0.6, 0.7))]:
        scorers = [fit(tr) for tr, _ in folds]
        for cut in cuts:
            out = pd.concat([replay_policy(h, lambda rows, f=f, c=cut: f(student_inputs(rows, SIGNALS, D)) > c, D)
                             for f, h in zip(scorers, held)])
            res[f"{name} {cut:g}"] = {"tokens_per_s": throughput(out),
                                      "mid_calls_per_round": float(out["schedule"].str.count("1").mean())}
    print(f"{len(first.drop_duplicates('state'))} round starts of {df['qid'].nunique()} prompts, {args.folds} folds by prompt; "
          f"modelled tokens/s (t_tgt {df['t_tgt_ms'].iloc[0]:g} ms, t_mid {df['t_mid_ms'].iloc[0]:g} ms)")
    print(f"  all-small {base['all-small']:.2f}   oracle {base['oracle']:.2f} ({base['oracle'] / base['all-small']:.3f}x)")
    for name, r in res.items():
        print(f"  {name:50s} {r['tokens_per_s']:.2f} ({r['tokens_per_s'] / base['all-small']:.3f}x), "
              f"{r['mid_calls_per_round']:.2f} calls a round")
    if args.json:
        args.json.write_text(json.dumps({
            "trajectories": str(args.trajectories), "folds": args.folds, "label_std": float(y.std()), **base,
            "held_out": res, "machine": cpu_name(), "date": datetime.date.today().isoformat(),
            "command": "scripts/signal_ceiling.py --trajectories " + str(args.trajectories)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
