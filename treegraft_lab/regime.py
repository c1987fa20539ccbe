"""The regime map: where choosing WHEN to call the mid drafter pays, priced on any device profile.

Replays are stored once: for each prompt, the target's greedy answer is decoded, and from EVERY
round start j = 0 .. L-1 of it (the committed context `prompt + answer[:j]`; greedy decoding is
lossless, so every decoder meets only such starts) all 2^D schedules are replayed
(`replay.replay_all`; acceptance is read from the known greedy answer, `replay.accept_known`,
so the target runs once per prompt): each leaf holds the schedule's accepted tokens, kept nodes, step sizes and
the mid drafter's backlog. A run under any per-round rule is then a walk over these starts
(j -> j + accepted + 1), priced by any `DeviceProfile` with the decoder's own rule
(`DeviceProfile.step_ms`) without running a model: all-small, all-mid, every fixed mask, and the
oracle, here the cheapest walk (a shortest path over the starts: the best any choice of one
schedule per round can do on that profile).

Pruning is top-k (the budget's best nodes by path score): the kept trees do not depend on the
profile. Value pruning keeps nodes by their modelled worth, so its trees change with the profile
and cannot be priced from one replay: the map is built for top-k only.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from treegraft_lab.config import DecodeConfig, parse_mask
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.engine import LOCAL, Engine, Unit, loader_of
from treegraft_lab.engine import run as run_units
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.replay import DEEPEST, leaf_ms
from treegraft_lab.resume import Journal
from treegraft_lab.rounds import release_acceptance

FORMAT = "treegraft-replays/1"
ENDPOINTS = ("all-small", "all-mid")
LEAF = ("schedule", "accepted", "kept", "backlog", "tail")


# ---------------------------------------------------------------------------- collection
def collect(pair, prompts: list[dict], config: DecodeConfig, max_new: int = 64, starts: int | None = None,
            first: tuple[str, ...] = (), have: pd.DataFrame | None = None, progress: bool = True,
            profile: DeviceProfile | None = None, journal: Journal | None = None, engine: Engine = LOCAL,
            seconds: dict | None = None) -> pd.DataFrame:
    """Every schedule replayed from round starts of each prompt's first `max_new` answer tokens:
    one row per (prompt, start, schedule). `config` must prune top-k, greedily.

    Which starts: the walks of the masks in `first` (e.g. the endpoints) are replayed start by
    start, then the starts any schedule reaches from a replayed one, nearest first, until
    `starts` per prompt in all (None: every start 0 .. L-1; the walks of `first` are always
    completed). A walk priced later needs only the starts it reaches; the oracle is the cheapest
    walk over the replayed starts. `have`: rows collected before (kept; their starts not replayed).
    `profile`: the profile `config.clock` names, resolved (`measure.resolve`; None: the decoder reads it).
    Each prompt is one unit (`collect_prompt`) on `engine` (`treegraft_lab.engine`: on Ray, `pair` is a
    `PairLoader`; the default, here in order; `seconds`: each unit's own time, as `engine.run` fills it); `journal` (`resume.Journal`): each prompt's rows are stored as
    it finishes ("collect/<i>/<qid>"), prompts it holds are not run again (no state crosses prompts: the
    decoder starts afresh at each start).
    """
    if config.prune != "topk":
        raise TreeGraftError("replays price anywhere only with top-k pruning (value pruning's trees depend on the profile)")
    loader = loader_of(pair)
    units = []
    for at, p in enumerate(prompts):
        old = have[have["qid"] == str(p["question_id"])] if have is not None and len(have) else None
        old = old.to_dict("records") if old is not None and len(old) else []
        units.append(Unit(f"collect/{at}/{p['question_id']}", collect_prompt,
                          (p, config, max_new, starts, first, old, profile), loader))
    parts = run_units(units, engine, journal, desc="replay (prompts)", progress=progress, seconds=seconds)
    return pd.DataFrame([row for part in parts for row in part])


def collect_prompt(pair, p: dict, config: DecodeConfig, max_new: int, starts: int | None, first: tuple[str, ...],
                   have: list[dict], profile: DeviceProfile | None) -> list[dict]:
    """One prompt's rows of `collect` (`have`: its rows collected before, kept and not replayed)."""
    from treegraft_lab.baselines import autoregressive
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.prompting import encode_prompt, eos_ids
    from treegraft_lab.replay import replay_all

    dec = TreeGraftDecoder(pair, replace(config, schedule="mid", temperature=0.0), profile)
    stop, D, cap = eos_ids(pair.tokenizer, pair.target), config.depth, starts or max_new
    ids = encode_prompt(pair.tokenizer, p["turns"][0])
    full = autoregressive(pair, ids, max_new_tokens=max_new + DEEPEST).token_ids  # trees may reach past D
    full = full[: next((i + 1 for i, t in enumerate(full) if t in stop), len(full))]
    cont = full[:max_new]
    L, ended = len(cont), cont[-1] in stop
    done: dict[int, dict[str, int]] = {}  # start -> {schedule: next start}
    meta = {"qid": str(p["question_id"]), "category": p.get("category", ""), "length": L, "ended": ended}
    for j, g in pd.DataFrame(have).groupby("pos") if have else ():
        done[int(j)] = {sc: int(j) + a + 1 for sc, a in zip(g["schedule"], g["accepted"])}
    rows = list(have)

    def replay(j: int) -> None:
        dec.start(ids + cont[:j])
        _, leaves, _ = replay_all(dec, shared_verify=False, timed=0, answer=full[j:])
        done[j] = {lf["schedule"]: j + lf["accepted"] + 1 for lf in leaves}
        rows.extend({**meta, "pos": j, **{c: lf[c] for c in LEAF}, **{f"size{k}": lf[f"size{k}"] for k in range(1, D + 1)}}
                    for lf in leaves)

    for mask in first:
        j = 0
        while j < L:
            if j not in done:
                replay(j)
            j = done[j][mask]
    while len(done) < min(cap, L):
        reach = sorted({n for nxt in done.values() for n in nxt.values() if n < L and n not in done})
        replay((reach or [j for j in range(L) if j not in done])[0])
    return rows


def save(df: pd.DataFrame, folder: str | Path, meta: dict) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    df.to_parquet(folder / "replays.parquet", index=False)
    (folder / "replays.json").write_text(json.dumps({"format": FORMAT, "rows": len(df), "prompts": int(df["qid"].nunique()),
                                                     "starts": int(df.groupby(["qid", "pos"]).ngroups), **meta},
                                                    indent=1, default=str) + "\n")
    return folder


def load(folder: str | Path) -> tuple[pd.DataFrame, dict]:
    folder = Path(folder)
    path = folder / "replays.parquet"
    if not path.is_file():
        raise TreeGraftError(f"no replays in {folder} (replays.parquet missing): make them with `treegraft-lab regime --collect`")
    meta = json.loads((folder / "replays.json").read_text())
    if meta.get("format") != FORMAT:
        raise TreeGraftError(f"{folder}/replays.json is not a {FORMAT} document: collect the replays again")
    return pd.read_parquet(path), meta


# ---------------------------------------------------------------------------- pricing
def masks(depth: int) -> list[str]:
    return ["".join(b) for b in itertools.product("01", repeat=depth)]


def schedule_name(mask: str) -> str:
    """all-small / all-mid for the endpoints, the mask itself otherwise."""
    return "all-small" if set(mask) == {"0"} else "all-mid" if set(mask) == {"1"} else mask


class Replays:
    """One prompt's replays, indexed for walking: leaf[pos][schedule] -> its row."""

    def __init__(self, df: pd.DataFrame, depth: int) -> None:
        self.depth = depth
        self.length = int(df["length"].iloc[0])
        self.qid = str(df["qid"].iloc[0])
        self.category = str(df["category"].iloc[0])
        self.rows = {(int(r["pos"]), r["schedule"]): r for r in df.to_dict("records")}

    def walk(self, profile: DeviceProfile, choose) -> dict:
        """A decode whose round at start j runs `choose(j, backlog)`'s schedule, priced by `profile`:
        {"tokens", "ms", "rounds", "accepted", "mid_calls"} as the decoder would report them, and
        "schedules": each round's schedule, space-separated."""
        j, backlog, ms, acc, run = 0, 0, 0.0, 0, []
        while j < self.length:
            lf = self.rows[(j, choose(j, backlog))]
            ms += sum(leaf_ms(profile, lf, self.depth, backlog))
            acc += int(lf["accepted"])
            run.append(lf["schedule"])
            tail = int(lf["tail"])
            backlog = tail if tail >= 0 else backlog + int(lf["accepted"]) + 1
            j += int(lf["accepted"]) + 1
        return {"tokens": self.length, "ms": ms, "rounds": len(run), "accepted": acc,
                "mid_calls": sum(m.count("1") for m in run), "schedules": " ".join(run)}

    def follows(self, schedules: str) -> bool:
        """Whether a recorded run (each round's mask, space-separated, in order: `decode`'s
        "schedules") stays on replayed starts until this answer's end."""
        j = 0
        for m in schedules.split():
            if j >= self.length:
                break
            if (j, m) not in self.rows:
                return False
            j += int(self.rows[(j, m)]["accepted"]) + 1
        return j >= self.length

    def follow(self, profile: DeviceProfile, schedules: str) -> dict:
        """`walk` of a recorded run: round i runs the run's i-th mask. A real decode's decisions,
        priced through the replays (so cut to their answer length); check `follows` first."""
        run = iter(schedules.split())
        return self.walk(profile, lambda j, b: next(run))

    def covers(self, mask: str) -> bool:
        """Whether every start the fixed `mask`'s walk reaches was replayed."""
        j = 0
        while j < self.length:
            if (j, mask) not in self.rows:
                return False
            j += int(self.rows[(j, mask)]["accepted"]) + 1
        return True

    def oracle(self, profile: DeviceProfile) -> dict:
        """The cheapest walk over the replayed starts: a shortest path (the backlog a start carries
        is the one its best way in leaves; exact when the mid curve is flat over backlogs). Over
        every start it is the best any choice of one schedule per round can do; over a subset,
        a schedule one could run that is at least as fast as every fixed mask the subset covers.
        Its "schedules" are the masks the path picks, round by round."""
        L, inf = self.length, math.inf
        best = [(inf, None, 0)] * (L + 1)  # (ms to reach, (from, schedule), backlog)
        best[0] = (0.0, None, 0)
        for j in range(L):
            ms0, _, b = best[j]
            if ms0 == inf or (j, "0" * self.depth) not in self.rows:
                continue
            for m in masks(self.depth):
                lf = self.rows[(j, m)]
                nxt = min(L, j + int(lf["accepted"]) + 1)
                ms = ms0 + sum(leaf_ms(profile, lf, self.depth, b))
                if ms < best[nxt][0]:
                    tail = int(lf["tail"])
                    best[nxt] = (ms, (j, m), tail if tail >= 0 else b + int(lf["accepted"]) + 1)
        path, j = {}, L
        while best[j][1] is not None:
            i, m = best[j][1]
            path[i] = m
            j = i
        return self.walk(profile, lambda j, b: path[j])


def split(df: pd.DataFrame, depth: int) -> list[Replays]:
    return [Replays(g, depth) for _, g in df.groupby("qid", sort=True)]


def price(reps: list[Replays], profile: DeviceProfile, schedules: list[str]) -> pd.DataFrame:
    """One row per (prompt, schedule): tokens, modelled ms, rounds, acceptance and mid calls on
    `profile`, and the speedup over plain decoding priced on the same profile. `schedules`:
    "all-small", "all-mid", "oracle", "best-fixed" (the mask best over all prompts) or a mask."""
    rows = []
    D = reps[0].depth if reps else 0
    todo = [s for s in schedules if s != "best-fixed"]
    if "best-fixed" in schedules:  # the masks every prompt's replays cover
        todo += [m for m in masks(D) if m not in todo and all(r.covers(m) for r in reps)]
    for r in reps:
        ar = r.length * profile.target_ms(1)
        for s in dict.fromkeys(todo):
            if s == "oracle":
                out = r.oracle(profile)
            else:
                mask = "0" * D if s == "all-small" else "1" * D if s == "all-mid" else s
                out = r.walk(profile, lambda j, b, m=mask: m)
            rows.append({"qid": r.qid, "category": r.category, "schedule": s, **out, "speedup": ar / out["ms"]})
    df = pd.DataFrame(rows)
    if "best-fixed" in schedules:
        fixed = df[df.schedule.isin(masks(D))]
        best = fixed.groupby("schedule")["speedup"].mean().idxmax()
        df = pd.concat([df[df.schedule.isin(schedules)],
                        df[df.schedule == best].assign(schedule="best-fixed", mask=best)], ignore_index=True)
    return df


def step_shares(df: pd.DataFrame) -> pd.DataFrame:
    """Which draft steps call the mid drafter: per (ratio, schedule), the share of all rounds (every
    prompt's, pooled) whose schedule calls it at step k = 1 .. D, from rows with a `schedules`
    column (`price` and `decode` rows; rows without one are left out). One row per (ratio,
    schedule, step); over the steps the shares add up to `summary`'s mid calls per round."""
    if "schedules" not in df:
        return pd.DataFrame(columns=["ratio", "schedule", "step", "share", "rounds"])
    rows = []
    for (r, s), g in df.dropna(subset=["schedules"]).groupby(["ratio", "schedule"], sort=False):
        bits = np.array([[c == "1" for c in m] for run in g["schedules"] for m in run.split()], dtype=float)
        rows += [{"ratio": r, "schedule": s, "step": k + 1, "share": float(bits[:, k].mean()), "rounds": len(bits)}
                 for k in range(bits.shape[1])]
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per schedule: mean speedup over prompts (the bench's definition), pooled speedup (all
    prompts' plain-decoding ms / their ms: long answers weigh more, copy-heavy ones less), the
    release's acceptance length A (`rounds.release_acceptance`: new tokens / target forwards,
    one prefill a prompt counted), mid calls per round, and n (prompts)."""
    g = df.groupby("schedule", sort=False)
    n = g.size()
    out = pd.DataFrame({"speedup": g["speedup"].mean(),
                        "speedup_pooled": (df["ms"] * df["speedup"]).groupby(df["schedule"], sort=False).sum() / g["ms"].sum(),
                        "A": release_acceptance(g["tokens"].sum(), g["rounds"].sum(), n),
                        "mid_calls_per_round": g["mid_calls"].sum() / g["rounds"].sum(),
                        "prompts": n})
    if "mask" in df:
        out["mask"] = g["mask"].first()
    return out.reset_index()


def by_ratio(rows: pd.DataFrame) -> pd.DataFrame:
    """`summary` at each ratio of rows with a `ratio` column (replay-priced and decoded alike)."""
    return pd.concat([summary(g).assign(ratio=r) for r, g in rows.groupby("ratio")], ignore_index=True)


def ratio_profiles(base: DeviceProfile, ratios: list[float]) -> list[tuple[float, DeviceProfile]]:
    """`base` with its mid curve scaled so that T_mid / T_tgt (`costs.scheduler_costs` of the
    lookup growth) takes each of `ratios`; the target curve is left as it is."""
    from treegraft_lab.costs import at_ratio

    return [(r, at_ratio(base, r)) for r in ratios]


def map_config(growth: str = "lookup", clock: str = "wall") -> DecodeConfig:
    """The regime map's decoding settings: D = 5, W = 10, top-k pruning at B_ver 63, `growth`, the
    n-gram drafter, on the profile `clock` names."""
    from treegraft_lab.config import GROWTHS

    return DecodeConfig(depth=5, width=10, budget=63, prune="topk", clock=clock, small="ngram", **GROWTHS[growth])


def log_ratios(lo: float = 0.02, hi: float = 1.0, n: int = 12) -> list[float]:
    return [float(f"{x:.3g}") for x in np.geomspace(lo, hi, n)]


def resolve_schedulers(schedulers: dict[str, str | Path], depth: int) -> dict:
    """name -> a loaded scheduler artifact (for a folder) or the schedule string (validated as the
    decoder does): a bad one is refused in one line, before any model loads."""
    from treegraft_lab.schedule import artifact as art_io

    def resolve(name: str, spec):
        if Path(spec).is_dir():
            return art_io.load(spec)
        try:
            parse_mask(str(spec), depth)
        except TreeGraftError as e:
            raise TreeGraftError(f"{name}={spec}: neither a scheduler folder nor a schedule ({e})") from None
        return str(spec)

    return {name: resolve(name, spec) for name, spec in schedulers.items()}


def decode(pair, prompts: list[dict], config: DecodeConfig, profiles: list[tuple[float, DeviceProfile]],
           schedulers: dict[str, str | Path], max_new: int = 64, progress: bool = True,
           journal: Journal | None = None, engine: Engine = LOCAL, seconds: dict | None = None) -> pd.DataFrame:
    """Real decodes with scheduler artifacts (name -> folder), switching rules (name -> a rule
    schedule with its value, "rule:match=2") or fixed schedules ("small", "mid", a mask) at each
    (ratio, profile), on the modelled clock: one
    row per (prompt, ratio, scheduler) as `price` has them, with each round's schedule. A family artifact takes the profile's
    T_tgt / T_mid; any other artifact is run as it is on every profile (what a single-profile
    scheduler does off its own device); a rule decides the same way on every profile. Each decode is one
    unit (`decode_prompt`) on `engine` (on Ray, `pair` is a `PairLoader`); `journal` (`resume.Journal`): each
    decode's row is stored as it finishes ("decode/<name>/<ratio>/<i>/<qid>"); decodes it holds are not run
    again (no state crosses prompts: the map's small drafter is the n-gram one)."""
    arts = resolve_schedulers(schedulers, config.depth)
    loader = loader_of(pair)
    units = [Unit(f"decode/{name}/{ratio!r}/{i}/{p['question_id']}", decode_prompt, (p, config, ratio, prof, name, art, max_new),
                  loader)
             for ratio, prof in profiles for name, art in arts.items() for i, p in enumerate(prompts)]
    parts = run_units(units, engine, journal, desc="decode (prompt, ratio, scheduler)", progress=progress,
                      seconds=seconds)
    return pd.DataFrame([row for part in parts for row in part])


def decode_prompt(pair, p: dict, config: DecodeConfig, ratio: float, prof: DeviceProfile, name: str, art,
                  max_new: int) -> list[dict]:
    """One row of `decode`: prompt `p` decoded by scheduler `name` (`art`: its loaded artifact, or a schedule
    string) on `prof`, the profile at `ratio`."""
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.schedule.adaptive import AdaptivePolicy, mid_card_agreement
    from treegraft_lab.schedule.artifact import AGREEMENT

    policy = art if isinstance(art, str) else AdaptivePolicy(art, mid_card_agreement(pair) if AGREEMENT in art.inputs else None)
    g = TreeGraftDecoder(pair, replace(config, schedule=policy, temperature=0.0), prof).generate(
        p["turns"][0], max_new_tokens=max_new)
    s = g.stats
    return [{"qid": str(p["question_id"]), "category": p.get("category", ""), "ratio": ratio, "schedule": name,
             "tokens": s["new_tokens"], "ms": s["modelled_ms"], "rounds": s["rounds"],
             "accepted": round(s["accepted_per_round"] * s["rounds"]),
             "mid_calls": round(s["mid_calls_per_round"] * s["rounds"]),
             "speedup": s["new_tokens"] * prof.target_ms(1) / s["modelled_ms"],
             "schedules": " ".join(r.schedule for r in g.rounds)}]


def load_decodes(folder: str | Path, base: str, reps: list[Replays] | None = None,
                 ratios: list[float] | None = None) -> pd.DataFrame:
    """Every stored decode of `folder` on profiles scaled from `base` (`decodes-<base>-<scheduler>.parquet`);
    with `reps` and `ratios`, only those prompts' decodes at those ratios (to 3 significant digits)."""
    parts = [pd.read_parquet(p) for p in sorted(Path(folder).glob(f"decodes-{base}-*.parquet"))]
    runs = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["qid", "ratio", "schedule"])
    if reps is not None:
        runs = runs[runs["qid"].isin({r.qid for r in reps})]
    if ratios is not None:
        runs = runs[runs["ratio"].apply(lambda r: any(math.isclose(r, x, rel_tol=5e-4) for x in ratios))]
    return runs.reset_index(drop=True)


def priced(reps: list[Replays], base: DeviceProfile, ratios: list[float], schedules: list[str]) -> pd.DataFrame:
    """`price`'s rows at each T_mid / T_tgt ratio of `base`, with a `ratio` column."""
    return pd.concat([price(reps, prof, schedules).assign(ratio=r) for r, prof in ratio_profiles(base, ratios)],
                     ignore_index=True)


def regime_map(reps: list[Replays], base: DeviceProfile, ratios: list[float], schedules: list[str]) -> pd.DataFrame:
    """`summary` of the replay-priced `schedules` at each T_mid / T_tgt ratio of `base`."""
    return by_ratio(priced(reps, base, ratios, schedules))


def oracle_band(m: pd.DataFrame, margin: float = 1.05, col: str = "speedup") -> list[float]:
    """The ratios where the oracle beats both endpoints by at least `margin` (on `col`)."""
    w = m.pivot_table(index="ratio", columns="schedule", values=col)
    if not {"oracle", *ENDPOINTS} <= set(w.columns):
        return []
    return [float(r) for r in w.index if w.loc[r, "oracle"] >= margin * max(w.loc[r, "all-small"], w.loc[r, "all-mid"])]


def crossing(m: pd.DataFrame, col: str = "speedup") -> float | None:
    """The ratio where all-small and all-mid cross on `col` (log-linear between the map's ratios);
    None when one endpoint wins everywhere."""
    w = m.pivot_table(index="ratio", columns="schedule", values=col).sort_index()
    if not set(ENDPOINTS) <= set(w.columns):
        return None
    d = np.log(w["all-mid"] / w["all-small"])
    for (r0, d0), (r1, d1) in zip(d.items(), list(d.items())[1:]):
        if d0 >= 0 > d1 or d0 < 0 <= d1:
            return float(np.exp(np.log(r0) + (np.log(r1) - np.log(r0)) * d0 / (d0 - d1)))
    return None


def markdown(m: pd.DataFrame, focus: str = "adaptive-family", marks: dict[str, float] | None = None) -> str:
    """The map as a markdown table, one row per ratio: the replay-priced schedules (mean speedup,
    the oracle's and every decoded scheduler's mid calls a round beside theirs), the oracle and
    `focus` over the better endpoint, then pooled speedups and `focus` pooled over the better
    endpoint. `marks`: {name: ratio} labels the rows within 2% of those ratios (a100-paper's 0.6)."""
    sp = m.pivot_table(index="ratio", columns="schedule", values="speedup")
    po = m.pivot_table(index="ratio", columns="schedule", values="speedup_pooled")
    calls = m.pivot_table(index="ratio", columns="schedule", values="mid_calls_per_round")
    mask = m[m.schedule == "best-fixed"].set_index("ratio")["mask"] if "mask" in m else pd.Series(dtype=object)
    decoded = [s for s in dict.fromkeys(m.schedule) if s not in (*ENDPOINTS, "best-fixed", "oracle") and set(s) - {"0", "1"}]
    fixed = [s for s in ("10101",) if s in sp.columns]

    def num(t, r, c, d=2) -> str:
        v = t.loc[r, c] if c in t.columns else float("nan")
        return "" if pd.isna(v) else f"{v:.{d}f}"

    def over(t, r, c, b) -> str:
        return "" if c not in t.columns or pd.isna(t.loc[r, c]) else f"{t.loc[r, c] / b:.3f}"

    def with_calls(r, c) -> str:
        s = num(sp, r, c)
        return f"{s} ({num(calls, r, c)})" if s else ""

    head = ["T_mid / T_tgt", "all-small", "all-mid", *fixed, "best fixed", "oracle (calls)",
            *[f"{d} (calls)" for d in decoded], "oracle / better endpoint", f"{focus} / better endpoint",
            f"pooled: all-small / all-mid / oracle / {focus}", f"pooled {focus} / better endpoint"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sp.index:
        be = max(sp.loc[r, e] for e in ENDPOINTS)
        bp = max(po.loc[r, e] for e in ENDPOINTS)
        name = next((f" ({k})" for k, v in (marks or {}).items() if abs(math.log(v / r)) < 0.02), "")  # within 2%
        best = f"{num(sp, r, 'best-fixed')} (`{mask.get(r, '')}`)" if "best-fixed" in sp.columns else ""
        cells = [f"{r:g}{name}", num(sp, r, "all-small"), num(sp, r, "all-mid"), *[num(sp, r, f) for f in fixed], best,
                 with_calls(r, "oracle"), *[with_calls(r, d) for d in decoded], over(sp, r, "oracle", be), over(sp, r, focus, be),
                 " / ".join(num(po, r, c) for c in ("all-small", "all-mid", "oracle", focus)), over(po, r, focus, bp)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def when_pays(gain: pd.Series, who: str = "the family scheduler",
              than: str = "the better fixed endpoint (all-small or all-mid)", tie: float = 0.005) -> str:
    """A sentence, computed from `gain` (ratio T_mid / T_tgt -> a scheduler's speedup over `than`),
    saying at which ratios it beats `than`, loses to it, or ties (within `tie`), each run of
    neighbouring ratios given as a range with its speedups."""
    g = gain.dropna().sort_index()
    if g.empty:
        return f"{who} was not decoded at any ratio of the map: nothing to compare with {than}."
    verdict = ["beats" if v > 1 + tie else "loses to" if v < 1 - tie else "ties with" for v in g]
    runs: list[tuple[str, list[float]]] = []
    for (r, _v), word in zip(g.items(), verdict):
        if runs and runs[-1][0] == word:
            runs[-1][1].append(r)
        else:
            runs.append((word, [r]))

    def where(rs: list[float]) -> str:
        span = f"{rs[0]:g}" + (f"–{rs[-1]:g}" if len(rs) > 1 else "")
        vals = f"{g[rs].min():.3f}–{g[rs].max():.3f}x" if len(rs) > 1 else f"{g[rs[0]]:.3f}x"
        return f"{span} ({vals})"

    phrases = []
    for word in ("beats", "loses to", "ties with"):
        spans = [where(rs) for w, rs in runs if w == word]
        if spans:
            obj = than if not phrases else "it"
            at = "at T_mid / T_tgt = " if not phrases else "at "
            phrases.append(f"{at}{' and '.join(spans)} {who if not phrases else 'it'} {word} {obj}")
    text = "; ".join(phrases)
    text = text[0].upper() + text[1:]
    return text + (f" (within {tie:.1%})." if "ties" in text else ".")


# ---------------------------------------------------------------------------- which scheduler is which
def stored_schedulers(folder: str | Path) -> dict[str, Path]:
    """The scheduler artifacts a replay folder's stored decodes ran with: decode name -> artifact folder, read from
    the `--scheduler NAME=FOLDER` of the commands its provenance.json records (a rule, NAME=rule:..., is no folder:
    left out)."""
    import re

    from treegraft_lab.paths import REPO_DIR

    path = Path(folder) / "provenance.json"
    commands = json.loads(path.read_text()).get("commands", []) if path.is_file() else []
    out = {}
    for cmd in commands:
        for name, spec in re.findall(r"--scheduler\s+([^=\s]+)=(\S+)", cmd):
            where = Path(spec) if Path(spec).is_absolute() else REPO_DIR / spec
            if where.is_dir():
                out[name] = where
    return out


def mixed_ratio(runs: pd.DataFrame, schedule: str, depth: int = 5) -> tuple[float, float] | None:
    """The ratio at which `schedule`'s stored decodes (`load_decodes` rows) call the mid drafter at the share
    of draft steps nearest one half (its decisions most mixed there), and that share; None without decodes."""
    g = runs[runs["schedule"] == schedule].groupby("ratio")[["mid_calls", "rounds"]].sum() if len(runs) else None
    if g is None or g.empty:
        return None
    share = g["mid_calls"] / (g["rounds"] * depth)
    r = float((share - 0.5).abs().idxmin())
    return r, float(share[r])


def bench_calls(folder: str | Path, method: str = "adaptive") -> dict | None:
    """What `method` decided in a stored benchmark (data/bench/<name>), priced on its modelled profile:
    prompts, rounds, mid calls, its modelled speedup over plain decoding, the method it decided exactly as
    ("same_as", or None) and the bench's settings; None when the folder holds no such rows."""
    folder = Path(folder)
    if not (folder / "records.parquet").is_file() or not (folder / "results.json").is_file():
        return None
    doc = json.loads((folder / "results.json").read_text())
    settings = doc.get("meta", {}).get("settings", {})
    clock = (settings.get("model_on") or ["wall"])[0]
    rec = pd.read_parquet(folder / "records.parquet")
    rows = rec[(rec["method"] == method) & (rec["clock"] == clock)]
    if rows.empty:
        return None
    res = doc.get("modelled", {}).get(clock, doc) if clock != "wall" else doc
    return {"prompts": int(rows["question_id"].nunique()), "rounds": int(rows["rounds"].sum()),
            "mid_calls": int(rows["mid_calls"].sum()), "speedup": res.get("overall", {}).get(method),
            "same_as": res.get("same_decisions", {}).get(method), "clock": clock, "settings": settings}


def held_out_gain(folder: str | Path) -> tuple[float, float] | None:
    """A scheduler artifact's own cross-validated record (scheduler.json): its modelled tokens/s over
    all-small's on the held-out round starts of its training prompts, and the share of held-out draft steps
    its student calls the mid drafter at; None where it records neither."""
    from treegraft_lab.schedule import artifact as art_io

    meta = art_io.read_meta(folder)
    tps, cv = meta.get("replay_tokens_per_s") or {}, meta.get("student_cv") or {}
    if not tps.get("00000") or "adaptive" not in tps or "call_rate" not in cv:
        return None
    return tps["adaptive"] / tps["00000"] - 1, float(cv["call_rate"])


def adaptive_name(folder: str | Path, pair: str, base: DeviceProfile, config: DecodeConfig) -> str | None:
    """The name of the replay `folder`'s stored decodes that ran TreeGraft adaptive for `pair` on `base` under
    `config` (`schedule.choice.treegraft_adaptive`, `stored_schedulers`); None when none did."""
    from treegraft_lab.schedule.choice import treegraft_adaptive

    mine = treegraft_adaptive(pair, base.name, config).resolve()
    return next((n for n, f in stored_schedulers(folder).items() if f.resolve() == mine), None)


ENDPOINT_METHODS = {"small": "all-small", "mid": "all-mid"}  # the bench's method names of the two endpoints


def which_adaptive(folder: str | Path, pair: str, base: DeviceProfile, config: DecodeConfig, runs: pd.DataFrame,
                   ratio: float, bench: str | Path | None = None) -> str:
    """Markdown, computed: which scheduler TreeGraft adaptive is for `pair` on `base`'s profile class under
    `config` (`schedule.choice.treegraft_adaptive`: what schedule="adaptive" loads), which of the replay
    `folder`'s stored decodes ran it, what it and every other stored scheduler (named for what it is) decide at
    `ratio` (mid calls a round, speedup) and over the ratios they were decoded at; and, where the workbench's
    default trees (`presets.SPEED`) have another TreeGraft adaptive, which, with what it decided in `bench`
    and on its held-out training round starts."""
    from treegraft_lab.schedule.adaptive import profile_class
    from treegraft_lab.schedule.choice import adaptive_words, treegraft_adaptive

    cls = profile_class(base)
    mine = treegraft_adaptive(pair, base.name, config)
    stored = stored_schedulers(folder)
    s = by_ratio(runs[runs["schedule"].isin(stored)]) if len(runs) else pd.DataFrame(columns=["schedule", "ratio"])
    mine_name = adaptive_name(folder, pair, base, config)
    out = [adaptive_words(pair, cls, config, mine).replace("TreeGraft adaptive", "**TreeGraft adaptive**", 1) + "."]
    if mine_name:
        out.append(f"Its decodes on this map are `{mine_name}`: {decided_at(s, mine_name, ratio)}{calls_span(s, mine_name)}.")
    for name, f in stored.items():
        if name != mine_name:
            out.append(other_scheduler_words(s, name, f, ratio, mine_name, mine.name, cls) + ".")
    default_words = default_trees_words(pair, base, config, mine, cls, bench)
    if default_words:
        out.append(default_words + ".")
    return " ".join(out)


def decoded_at(s: pd.DataFrame, name: str, ratio: float) -> pd.DataFrame:
    """Scheduler `name`'s rows of `s` (`by_ratio` rows) at `ratio` (within 0.05%)."""
    return s[(s["schedule"] == name) & np.isclose(s["ratio"], ratio, rtol=5e-4)]


def calls_at(s: pd.DataFrame, name: str, ratio: float) -> float | None:
    """Scheduler `name`'s mid calls a round at `ratio`, or None where it was not decoded there."""
    g = decoded_at(s, name, ratio)
    return None if g.empty else float(g["mid_calls_per_round"].iloc[0])


def decided_at(s: pd.DataFrame, name: str, ratio: float) -> str:
    """What scheduler `name` decides at `ratio`, in words: its mid calls a round and its speedup."""
    g = decoded_at(s, name, ratio)
    if g.empty:
        return f"it was not decoded at T_mid / T_tgt {ratio:g}"
    return f"at T_mid / T_tgt {ratio:g} it makes {g['mid_calls_per_round'].iloc[0]:.2f} mid calls a round " \
           f"({g['speedup'].iloc[0]:.2f}x plain decoding)"


def calls_span(s: pd.DataFrame, name: str) -> str:
    """How scheduler `name`'s mid calls follow the ratio, lowest to highest decoded; "" at one ratio."""
    g = s[s["schedule"] == name].sort_values("ratio")
    if g["ratio"].nunique() < 2:
        return ""
    lo, hi = g.iloc[0], g.iloc[-1]
    return (f"; it reads the ratio, and its calls follow it: {lo['mid_calls_per_round']:.2f} a round at "
            f"{lo['ratio']:g}, {hi['mid_calls_per_round']:.2f} at {hi['ratio']:g}")


def other_scheduler_words(s: pd.DataFrame, name: str, folder: Path, ratio: float, mine_name: str | None,
                          mine: str, cls: str) -> str:
    """A stored scheduler that is not TreeGraft adaptive: what it is and decides, and (a family or map scheduler)
    how its calls at `ratio` compare with TreeGraft adaptive's."""
    from treegraft_lab.schedule.choice import scheduler_kind

    kind = scheduler_kind(folder)
    line = (f"`{name}` is {folder.name}, the {kind}, not TreeGraft adaptive for any one profile (it runs only when "
            f"its folder is named, `scheduler_path`): {decided_at(s, name, ratio)}{calls_span(s, name)}")
    a, b = (calls_at(s, mine_name, ratio) if mine_name else None), calls_at(s, name, ratio)
    if a is not None and b is not None and kind.startswith(("family", "map")):
        one = s.loc[s["schedule"] == mine_name, "ratio"].nunique() == 1
        line += (f". At {ratio:g} the two decide {'alike' if abs(a - b) < 0.1 else 'differently'} ({a:.2f} and "
                 f"{b:.2f} mid calls a round); only {name} was trained to follow the cost ratio across profiles, "
                 f"while {mine} was trained on {cls} alone"
                 + (f", so the map decodes it at {cls}'s ratio only" if one else ""))
    return line


def default_trees_words(pair: str, base: DeviceProfile, config: DecodeConfig, mine: Path, cls: str,
                        bench: str | Path | None) -> str:
    """Where the workbench's default trees (the speed preset) have another TreeGraft adaptive than `mine`: which,
    what it decided in `bench` and on its held-out training round starts; else ""."""
    from treegraft_lab.config import preset
    from treegraft_lab.schedule.choice import treegraft_adaptive

    default = preset("speed", prune=config.prune, clock=base.name)
    theirs = treegraft_adaptive(pair, base.name, default)
    if theirs.resolve() == mine.resolve():
        return ""
    line = (f"The workbench's default trees (the speed preset: growth {default.growth}, small drafter "
            f"{default.small}; notebook 05's run, the README's modelled column) have their own TreeGraft adaptive "
            f"on {cls}, {theirs.name}")
    b = bench_calls(bench) if bench else None
    if b and b["settings"].get("small") == default.small and b["clock"] == base.name:
        line += (f": on the {b['prompts']} eval prompts of `{Path(bench).name}` it made {b['mid_calls']} mid calls "
                 f"in {b['rounds']} rounds ({b['speedup']:.2f}x plain decoding"
                 + (f", the same decisions as {ENDPOINT_METHODS.get(b['same_as'], b['same_as'])})"
                    if b["same_as"] else ")"))
    gains = [held_out_gain(f) if (f / "scheduler.json").is_file() else None for f in (theirs, mine)]
    if all(gains):
        (g1, c1), (g0, c0) = gains
        line += (f". On the held-out round starts of its training prompts it gains {g1:+.1%} over all-small and "
                 f"calls at {c1:.1%} of the draft steps, against {g0:+.1%} and {c0:.1%} for {mine.name}: "
                 + ("with those trees a mid call pays less on this profile" if g1 < g0 and c1 < c0 else
                    "it was trained on other trees"))
    return line


# ---------------------------------------------------------------------------- the mid drafter axis
def held_out_folder(pair: str, growth: str = "lookup") -> Path:
    """The held-out replays (the validation split's) of a pair and growth."""
    return replay_folder(pair, growth).with_name(replay_folder(pair, growth).name + "-validation")


def replay_folder(pair: str, growth: str = "lookup") -> Path:
    """Where a pair's replays are stored: data/regime/<pair>-<growth>-topk (one folder per mid drafter)."""
    from treegraft_lab.paths import DATA_DIR

    return DATA_DIR / "regime" / f"{pair.replace('/', '_')}-{growth}-topk"


def mid_agreement(pair: str) -> float:
    """The pair's mid drafter's greedy top-1 agreement with its target, from its model card
    (data/models/<mid>/card.json, written by `treegraft-lab zoo card --write-card`)."""
    from treegraft_lab.models import PAIRS
    from treegraft_lab.paths import MODELS_DIR

    if pair not in PAIRS:
        raise TreeGraftError(f"unknown pair {pair!r}; known pairs: {', '.join(PAIRS)}")
    card = MODELS_DIR / PAIRS[pair][1] / "card.json"
    if not card.is_file():
        raise TreeGraftError(f"{pair}: its mid drafter has no measured card ({card} missing): "
                             f"run `treegraft-lab zoo card {pair} --write-card`")
    return float(json.loads(card.read_text())["agreement"])


def mid_axis_map(maps: dict[str, tuple[float, pd.DataFrame]]) -> pd.DataFrame:
    """The two-axis map: `maps` is mid drafter (pair) -> (its agreement, `regime_map`/`by_ratio` rows);
    returns their rows stacked with `mid` and `agreement` columns, sorted by agreement."""
    if not maps:
        raise TreeGraftError("no mid drafters to map: give at least one pair with stored replays")
    parts = [m.assign(mid=name, agreement=float(a)) for name, (a, m) in maps.items()]
    return pd.concat(parts, ignore_index=True).sort_values(["agreement", "ratio"], kind="stable", ignore_index=True)


def cells(m: pd.DataFrame, schedulers: list[str] | None = None) -> pd.DataFrame:
    """One row per (mid drafter, ratio) of a `mid_axis_map`: both endpoints' and the oracle's mean
    speedups, `better` (the better endpoint: "all-small" or "all-mid"), `oracle_gain` (oracle /
    better endpoint) and, for each decoded scheduler in `schedulers` (default: every schedule that is
    neither an endpoint, the oracle, best-fixed nor a mask), `<name>_gain` (it / better endpoint;
    NaN where it was not decoded)."""
    w = m.pivot_table(index=["mid", "agreement", "ratio"], columns="schedule", values="speedup", sort=False)
    missing = {"oracle", *ENDPOINTS} - set(w.columns)
    if missing:
        raise TreeGraftError(f"the map lacks {', '.join(sorted(missing))}: price all-small, all-mid and oracle")
    if schedulers is None:
        schedulers = [s for s in w.columns if s not in (*ENDPOINTS, "oracle", "best-fixed") and set(s) - {"0", "1"}]
    best = w[list(ENDPOINTS)].max(axis=1)
    out = pd.DataFrame({"all-small": w["all-small"], "all-mid": w["all-mid"], "oracle": w["oracle"],
                        "better": np.where(w["all-mid"] > w["all-small"], "all-mid", "all-small"),
                        "oracle_gain": w["oracle"] / best})
    for s in schedulers:
        out[f"{s}_gain"] = (w[s] / best) if s in w.columns else np.nan
    return out.reset_index().sort_values(["agreement", "ratio"], kind="stable", ignore_index=True)


def cells_markdown(c: pd.DataFrame, gains: list[str] | None = None) -> str:
    """`cells` as a markdown table: one row per mid drafter, one column per ratio, each cell
    "oracle / better endpoint (S|M)" with S = all-small better, M = all-mid better, and the gain
    of each scheduler in `gains` (default: every one in `c`) after a slash where it was priced."""
    gains = ([f"{g}_gain" for g in gains] if gains is not None
             else [col for col in c.columns if col.endswith("_gain") and col != "oracle_gain"])
    ratios = sorted(c["ratio"].unique())
    head = ["mid drafter (agreement)", *[f"{r:g}" for r in ratios]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (mid, a), g in c.groupby(["mid", "agreement"], sort=False):
        g = g.set_index("ratio")
        row = [f"{mid} ({a:.3f})"]
        for r in ratios:
            if r not in g.index:
                row.append("")
                continue
            x = g.loc[r]
            extra = "".join(f" / {x[s]:.3f}" for s in gains if pd.notna(x.get(s, np.nan)))
            row.append(f"{x['oracle_gain']:.3f}{extra} ({'M' if x['better'] == 'all-mid' else 'S'})")
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def common_prompts(frames: dict[str, pd.DataFrame], max_new: int) -> dict[str, pd.DataFrame]:
    """The replays of several mid drafters cut to what they all price alike: the prompts every frame
    holds, and each answer's first `max_new` tokens (the smallest `max_new` they were collected
    with; the target's greedy answer is the same whatever the mid drafter, so the cut answers match)."""
    qids = set.intersection(*(set(df["qid"]) for df in frames.values())) if frames else set()
    if not qids:
        raise TreeGraftError(f"the replays of {', '.join(frames)} share no prompt: collect them on the same eval prompts")
    out = {}
    for name, df in frames.items():
        d = df[df["qid"].isin(qids) & (df["pos"] < max_new)].copy()
        cut = d["length"] > max_new
        d.loc[cut, "length"] = max_new
        d.loc[cut, "ended"] = False
        out[name] = d
    return out


def replay_cpu(folder: str | Path) -> str:
    """The CPU a replay folder was collected on: `provenance.json`'s "cpu" (else its "machine"),
    "CPU not recorded" when the folder records none."""
    path = Path(folder) / "provenance.json"
    prov = json.loads(path.read_text()) if path.is_file() else {}
    return str(prov.get("cpu") or prov.get("machine") or "CPU not recorded")


def refollow(reps: list[Replays], runs: pd.DataFrame, base: DeviceProfile, ratios: list[float]) -> tuple[pd.DataFrame, int]:
    """Stored decodes (`load_decodes` rows with "schedules") priced through `reps` at the map's
    ratios: each run's recorded masks walked round by round (`Replays.follow`), so a decode of
    more tokens is cut to the replays' answers. Rows as `priced` has them; and how many runs were
    left out (they reach a start the replays lack, or their prompt is not in `reps`)."""
    by_qid = {r.qid: r for r in reps}
    profs = ratio_profiles(base, ratios)
    rows, left = [], 0
    for x in runs.to_dict("records"):
        rep = by_qid.get(str(x["qid"]))
        at = [(r, p) for r, p in profs if math.isclose(r, x["ratio"], rel_tol=5e-4)]
        if rep is None or not at or not rep.follows(x["schedules"]):
            left += 1
            continue
        r, prof = at[0]
        out = rep.follow(prof, x["schedules"])
        rows.append({"qid": rep.qid, "category": rep.category, "schedule": x["schedule"], **out,
                     "speedup": rep.length * prof.target_ms(1) / out["ms"], "ratio": r})
    return pd.DataFrame(rows), left


RULES = ("rule:match", "rule:score")


def rule_mask(rule: str, value: float, depth: int) -> str | None:
    """The fixed mask a switching rule runs when its decision reads no signal: at a value <= 0 it
    never calls the mid drafter (`RulePolicy.decide`), so it is all-small. None otherwise: its
    decisions read the scheduler's signals, which replays do not store."""
    if rule not in RULES:
        raise TreeGraftError(f"unknown switching rule {rule!r}; rules: {', '.join(RULES)}")
    return "0" * depth if value <= 0 else None


def fitted_rules(pair: str, config: DecodeConfig, profile: DeviceProfile) -> dict[str, float]:
    """The switching rules' fitted values for `config`'s trees on `profile`'s class
    (data/scheduler/<pair>/rules.json, `treegraft-lab fit-rules`): rule -> value; {} if none."""
    from treegraft_lab.schedule.rules import read_fitted, rules_key

    got = read_fitted(pair).get(rules_key(config, profile), {})
    return {r: float(got[r]["value"]) for r in RULES if r in got}


MAP_SCHEDULES = ("all-small", "all-mid", "oracle")
# the schedulers the map prices from their stored decodes: the pocket drafter's family scheduler, then the one
# trained across mid drafters with their agreement as an input (data/scheduler/smollm2-pocket/map-topk-lookup)
MAP_SCHEDULERS = ("adaptive-family", "adaptive-map")
# a replay folder's subfolder of decodes run at the map's answer length where the folder's own replays and
# decodes are longer (the pocket drafter's 64 tokens): kept apart from the folder's own map over ratios
MIDS_DECODES = "mids"
STORED_MIDS = ("smollm2-pocket", "smollm2-cut28", "smollm2-int8", "smollm2-self")  # the pairs whose replays data/regime holds, for the map


@dataclass
class MidAxis:
    """The map over mid drafters: `cells` (`cells` rows: gains of the oracle, each of `schedulers` and
    the rules over the better endpoint), the prompts and answer length all were priced on, each
    mid drafter's CPU (`replay_cpu`), the rules' names, and `notes`: what could not be priced and why.
    `scheduler`: the first of `schedulers` (the heatmap's)."""

    cells: pd.DataFrame
    prompts: list[str]
    max_new: int
    cpus: dict[str, str]
    scheduler: str
    rules: list[str]
    notes: list[str]
    schedulers: list[str] = field(default_factory=list)


def mid_axis(pairs: list[str], base: DeviceProfile, ratios: list[float], growth: str = "lookup",
             scheduler: str | tuple[str, ...] = MAP_SCHEDULERS, rules_of: str | None = None,
             schedules: tuple[str, ...] = MAP_SCHEDULES) -> MidAxis:
    """Price every pair's stored replays at `ratios` of `base` on the prompts they all hold, cut to
    the shortest answers (`common_prompts`); each `scheduler`'s (one name or several) stored decodes of
    each pair (decodes-<base>-<scheduler>.parquet) as they are when they ran that many tokens, else re-walked
    through the cut replays (`refollow`); the switching rules fitted for `rules_of`'s scheduler
    (`fitted_rules`) where they need no signal (`rule_mask`). No model runs."""
    from treegraft_lab.presets import DEFAULT_PAIR

    cfg = map_config(growth)
    names = [scheduler] if isinstance(scheduler, str) else list(scheduler)
    agreement = {p: mid_agreement(p) for p in pairs}  # a missing card is refused before any pricing
    loaded = {p: load(replay_folder(p, growth)) for p in pairs}
    max_new = min(int(meta.get("max_new", 64)) for _, meta in loaded.values())
    frames = common_prompts({p: df for p, (df, _) in loaded.items()}, max_new)
    rules = fitted_rules(rules_of or DEFAULT_PAIR, cfg, base)
    notes = [f"{r}={v:g}: its decisions read signals the replays do not store: not priced"
             for r, v in rules.items() if rule_mask(r, v, cfg.depth) is None]
    maps = {}
    for p in pairs:
        reps = split(frames[p], cfg.depth)
        rows = [priced(reps, base, ratios, list(schedules))]
        rows += [priced(reps, base, ratios, [m]).assign(schedule=f"{r}={v:g}")
                 for r, v in rules.items() if (m := rule_mask(r, v, cfg.depth))]
        walk = int(loaded[p][1].get("max_new", max_new)) > max_new  # longer decodes: re-walked, cut
        stored = load_decodes(replay_folder(p, growth), base.name, reps, ratios)
        cut = load_decodes(replay_folder(p, growth) / MIDS_DECODES, base.name, reps, ratios) if walk else stored.iloc[:0]
        runs = [decoded(stored, cut, name, p, reps, base, ratios, walk, notes) for name in names]
        maps[p] = (agreement[p], by_ratio(pd.concat([*rows, *runs], ignore_index=True)))
    c = cells(mid_axis_map(maps), [*names, *(f"{r}={v:g}" for r, v in rules.items())])
    return MidAxis(c, sorted(frames[pairs[0]]["qid"].unique()), max_new,
                   {p: replay_cpu(replay_folder(p, growth)) for p in pairs}, names[0],
                   [f"{r}={v:g}" for r, v in rules.items()], notes, names)


def decoded(stored: pd.DataFrame, cut: pd.DataFrame, scheduler: str, pair: str, reps: list[Replays],
            base: DeviceProfile, ratios: list[float], walk: bool, notes: list[str]) -> pd.DataFrame:
    """`scheduler`'s rows of a pair's decodes of the map's answer length (`cut`, from the replay folder's
    `MIDS_DECODES` subfolder) as they are, else of its stored decodes, walked through the cut replays when
    `walk` (`refollow`: they ran longer); what cannot be priced is said in `notes`."""
    if len(cut) and (cut["schedule"] == scheduler).any():
        return cut[cut["schedule"] == scheduler]
    runs = stored[stored["schedule"] == scheduler] if len(stored) else stored.iloc[:0]
    if walk and len(runs):
        runs, left = refollow(reps, runs, base, ratios)
        if left:
            notes.append(f"{pair}: {left} {scheduler} runs reach a start its replays lack: left out")
    if not len(runs):
        notes.append(f"{pair}: no stored {scheduler} decodes (decodes-{base.name}-{scheduler}.parquet) and its "
                     f"replays store no scheduler signals: not priced")
    return runs


def acceptance(c: pd.DataFrame, scheduler: str, oracle_min: float = 1.15, reach: float = 1.05) -> dict:
    """Among the cells where the oracle is at least `oracle_min` x the better endpoint: how many
    ("cells"), at how many `scheduler` was priced ("priced"), and at how many it reaches at least
    `reach` x the better endpoint ("reached")."""
    hot = c[c["oracle_gain"] >= oracle_min]
    g = hot[f"{scheduler}_gain"] if f"{scheduler}_gain" in hot else pd.Series(np.nan, index=hot.index)
    return {"cells": len(hot), "priced": int(g.notna().sum()), "reached": int((g >= reach).sum()),
            "oracle_min": oracle_min, "reach": reach}


def acceptance_text(a: dict, scheduler: str) -> str:
    """`acceptance` in one sentence."""
    head = (f"In {a['cells']} cells the oracle is at least {a['oracle_min']:g}x the better endpoint; "
            f"{scheduler} reaches at least {a['reach']:g}x it in {a['reached']}")
    if a["priced"] == a["cells"]:
        return head + f" of them ({a['reached']}/{a['cells']})."
    return head + (f" of the {a['priced']} it was priced at ({a['cells'] - a['priced']} not priced): "
                   f"{a['reached']}/{a['cells']} of all.")


def capture(c: pd.DataFrame, scheduler: str, oracle_min: float = 1.15, floor: float = 0.98) -> dict:
    """How much of the oracle's gain `scheduler` takes, over the `cells` rows where the oracle is at
    least `oracle_min` x the better endpoint: per cell capture = (S - better) / (oracle - better)
    = (S_gain - 1) / (oracle_gain - 1) (1: all of the oracle's gain, 0: the better endpoint's speed,
    < 0: slower than it); `mean_capture` over those cells where it was priced, `pooled_capture` (the
    gains summed over the cells first), `cells`, `priced`, and `below_098` (cells where S < `floor` x
    the better endpoint)."""
    hot = c[c["oracle_gain"] >= oracle_min]
    g = hot[f"{scheduler}_gain"] if f"{scheduler}_gain" in hot else pd.Series(np.nan, index=hot.index)
    ok = g.notna()
    per = (g[ok] - 1) / (hot["oracle_gain"][ok] - 1)
    pooled = float((g[ok] - 1).sum() / (hot["oracle_gain"][ok] - 1).sum()) if ok.any() else math.nan
    return {"mean_capture": float(per.mean()) if ok.any() else math.nan, "pooled_capture": pooled,
            "median_capture": float(per.median()) if ok.any() else math.nan, "cells": int(len(hot)),
            "priced": int(ok.sum()), "below_098": int((g[ok] < floor).sum()), "oracle_min": oracle_min}


def capture_text(cap: dict, scheduler: str) -> str:
    """`capture` in one sentence."""
    if not cap["priced"]:
        return f"{scheduler}: not priced in the {cap['cells']} cells where the oracle is >= {cap['oracle_min']:g}x the better endpoint"
    return (f"{scheduler} takes {cap['mean_capture']:.0%} of the oracle's gain on average over the {cap['priced']} of "
            f"{cap['cells']} cells where the oracle is >= {cap['oracle_min']:g}x the better endpoint (pooled "
            f"{cap['pooled_capture']:.0%}, median {cap['median_capture']:.0%}); below 0.98x the better endpoint in "
            f"{cap['below_098']}")
