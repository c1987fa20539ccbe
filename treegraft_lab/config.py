"""DecodeConfig: every knob of one decoding run, with the paper's defaults and validation."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.presets import FULL_GROWTH, GROWTHS, PRESETS, RELEASE_RULES  # noqa: F401  (RELEASE_RULES: re-exported)

NAMED_SCHEDULES = ("auto", "small", "mid", "adaptive", "learned", "oracle", "rule:match", "rule:score")
PRUNES = ("auto", "topk", "value")
RULES = ("rule:match", "rule:score")  # optionally with its value: "rule:match=3", "rule:score=0.3"
EXPANSIONS = ("per_parent", "global")
# The named tree-growth rules (`presets.GROWTHS`, each every field of GROWTH_FIELDS): "release" is
# replayed round for round by tests/test_release_replay.py.
GROWTH_FIELDS = tuple(FULL_GROWTH)
MATCHERS = ("index", "release")
FRONTIER_ORDERS = ("score", "match")


def need(ok: bool, msg: str) -> None:
    """Refuse a setting in one line (`msg` says what to do) unless `ok`."""
    if not ok:
        raise TreeGraftError(msg)


def parse_mask(schedule: Any, depth: int) -> tuple[int, ...] | None:
    """Return the 0/1 mask for a mask-like schedule ("10101", [1,0,1,0,1]); None otherwise."""
    if isinstance(schedule, str) and schedule.startswith("rule:"):
        rule_value(schedule)  # raises on a bad rule
        return None
    if isinstance(schedule, str) and schedule not in NAMED_SCHEDULES:
        if not schedule or set(schedule) - {"0", "1"}:
            raise TreeGraftError(
                f"schedule {schedule!r} is not one of {', '.join(NAMED_SCHEDULES)} nor a 0/1 mask "
                f"such as '10101' (1 = call the mid drafter at that draft step)"
            )
        bits = tuple(int(c) for c in schedule)
    elif isinstance(schedule, (list, tuple)):
        if not all(b in (0, 1, True, False) for b in schedule):
            raise TreeGraftError(f"schedule mask {list(schedule)} must hold only 0 and 1")
        bits = tuple(int(b) for b in schedule)
    else:
        return None
    if len(bits) != depth:
        raise TreeGraftError(
            f"schedule mask {''.join(map(str, bits))} has {len(bits)} steps but depth={depth}; "
            f"give one bit per draft step"
        )
    return bits


SMALL_DRAFTERS = ("ngram", "recycling", "suffix")


def parse_small(small: str) -> tuple[str, ...]:
    """"ngram+suffix" -> ("ngram", "suffix"); raises TreeGraftError with the one-line reason."""
    parts = tuple(p.strip() for p in str(small).split("+"))
    if not parts or any(p not in SMALL_DRAFTERS for p in parts) or len(set(parts)) != len(parts):
        raise TreeGraftError(f"small must be one of {', '.join(SMALL_DRAFTERS)} or a '+'-joined combination "
                         f"such as 'ngram+suffix', got {small!r}")
    return parts


def rule_value(schedule: str) -> tuple[str, float | None]:
    """"rule:match=3" -> ("rule:match", 3.0); "rule:score" -> ("rule:score", None): the value fitted
    for the pair and clock is read from its card (`schedule.rules`)."""
    name, _, value = schedule.partition("=")
    if name not in RULES:
        raise TreeGraftError(f"schedule {schedule!r}: the rules are {', '.join(RULES)}, optionally with a value "
                             f"('rule:match=3': call the mid drafter while the context match is shorter than 3 tokens)")
    if not value:
        return name, None
    try:
        x = float(value)
    except ValueError:
        x = -1.0
    if x < 0:
        raise TreeGraftError(f"schedule {schedule!r}: the value after '=' must be a number >= 0")
    return name, x


@dataclass
class DecodeConfig:
    """One decoding run: every knob, validated, with literal defaults (the speed preset, `presets.SPEED`,
    what the command line means with no flags; `preset("full")`, `preset("release")` are the others).

    With schedule="auto" and prune="auto" the decoder picks them for its pair and device profile and
    says so in one line: adaptive where a scheduler is trained for them, else all-small; value pruning
    where a verified node costs, else top-k (`schedule.choice.resolve_auto`). Ask for a schedule by
    name ("10101") to see grafting in every tree. The growth fields (expansion ... mid_scores_all)
    together are one `growth.Growth`: "full", "lookup" (the default), "compact" or "release"
    (`GROWTHS`; the six fields marked "release" are the authors' release's own rules, off elsewhere).
    docs/design.md has the definitions behind each field.
    """

    # ---- the tree: D, W, B_ver ----------------------------------------------------------------------
    depth: int = 5                      # D: draft steps per round
    width: int = 10                     # W: frontier width (the nodes a step expands)
    children: int = 10                  # k: children per frontier node (expansion "per_parent")
    budget: int | str = 63              # B_ver: non-root nodes the target verifies, or "auto" (from the profile)
    max_nodes: int | None = None        # drafting cap, root included (None: 1 + k + D * W * k = 511)
    prune: str = "auto"                 # "topk" (the paper), "value" (cost-aware, budget.ValuePruner) or "auto"
    # ---- growth (`growth.Growth`; the "lookup" rule) --------------------------------------------------
    expansion: str = "per_parent"       # "per_parent": top-k children per frontier node; "global": top-W overall
    ngram_chain: bool = True            # an n-gram continuation comes with the tokens that followed it
    chain_len: int | None = None        # tokens per chain (None: max(1, ngram_max - (step - 1)))
    lookup: int = 16                    # prompt lookup's draft (tokens) under the root at the first small step (0: off)
    lookup_longest: bool = True         # with it, the chain after the longest earlier match too (suffix decoding's match)
    chain_frontier: bool = True         # that draft's deepest node joins the next frontier
    min_step_p: float = 0.1             # skip a small step whose best node's path probability is below this (0: never)
    lookback: int | None = 5            # WHERE: depths above the frontier a mid step may reselect (None: every unscored node)
    fuse_prompt: bool = True            # release (False): the target's prompt has a forward of its own
    stop_on_relax_zero: bool = False    # release: a parent short of k distinct tokens is ended; growth stops
    first_step_fallback: bool = False   # release: an empty first n-gram step gets the most frequent token
    matcher: str = "index"              # release ("release"): every continuation, scored by the prompt's log-probs
    frontier_order: str = "score"       # release ("match"): next frontier by n-gram match size, then score
    mid_scores_all: bool = False        # release: a mid call scores every node and overrides every edge
    # ---- the drafters ---------------------------------------------------------------------------------
    small: str = "ngram+recycling"      # small drafter(s): "ngram", "recycling", "suffix", "+"-joined
    recycle_below: int = 2              # recycled candidates only under nodes whose n-gram match is shorter (0: all)
    ngram_max: int = 5                  # longest n-gram matched
    ngram_min: int = 1                  # shortest n-gram matched
    expanded_graft: bool = True         # EG: a mid step may reselect earlier nodes (WHERE)
    non_destructive: bool = True        # ND: mid children are added beside the small drafter's (HOW)
    # ---- WHEN ---------------------------------------------------------------------------------------------
    schedule: Any = "auto"              # "small", "mid", a 0/1 mask ("10101"), "adaptive", "learned", "oracle", "rule:match[=tau]",
                                        # "rule:score[=p]", an object with decide(ctx) -> bool, or "auto"
    call_budget: int | None = None      # most mid calls per round (None: no cap)
    mid_in_first_round: bool = False    # may a policy (not a mask) call the mid drafter in a generation's first round
    scheduler_path: str | None = None   # the adaptive or learned scheduler's folder (None: the one trained for the pair)
    # ---- sampling and costs -------------------------------------------------------------------------------
    temperature: float = 0.0            # 0: greedy
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    clock: str = "wall"                 # the profile decisions read: "wall" (this device's), a name, or a JSON file

    def __post_init__(self) -> None:
        self.check_tree()
        self.check_growth()
        self.check_run()

    def check_tree(self) -> None:
        """D, W, k, the budget and the drafting cap."""
        need(isinstance(self.depth, int) and self.depth >= 1, f"depth must be an integer >= 1, got {self.depth!r}")
        need(isinstance(self.width, int) and self.width >= 1, f"width must be an integer >= 1, got {self.width!r}")
        need(self.expansion in EXPANSIONS,
             f"expansion must be 'per_parent' (the release: top-k children for each frontier parent) or 'global' "
             f"(the global top-W children of the frontier), got {self.expansion!r}")
        need(isinstance(self.children, int) and self.children >= 1, f"children must be an integer >= 1, got {self.children!r}")
        need(self.max_nodes is None or (isinstance(self.max_nodes, int) and self.max_nodes >= 2),
             f"max_nodes (the drafting cap, root included) must be an integer >= 2 or None, got {self.max_nodes!r}")
        if self.budget != "auto":
            need(
                isinstance(self.budget, int) and self.budget >= 1,
                f"budget must be an integer >= 1 (non-root nodes verified) or 'auto', got {self.budget!r}",
            )

    def check_growth(self) -> None:
        """The growth fields (`growth.Growth`), the release's rules among them."""
        need(isinstance(self.ngram_chain, bool), f"ngram_chain must be True or False, got {self.ngram_chain!r}")
        need(self.chain_len is None or (isinstance(self.chain_len, int) and self.chain_len >= 1),
             f"chain_len must be an integer >= 1 (tokens per n-gram chain) or None (the release's lengths), "
             f"got {self.chain_len!r}")
        need(isinstance(self.lookup, int) and not isinstance(self.lookup, bool) and self.lookup >= 0,
             f"lookup must be an integer >= 0 (tokens of prompt lookup's draft grafted under the root at the "
             f"first small step; 0: off), got {self.lookup!r}")
        need(isinstance(self.lookup_longest, bool), f"lookup_longest must be True or False, got {self.lookup_longest!r}")
        need(isinstance(self.chain_frontier, bool), f"chain_frontier must be True or False, got {self.chain_frontier!r}")
        need(isinstance(self.min_step_p, (int, float)) and 0 <= self.min_step_p < 1,
             f"min_step_p must be a probability in [0, 1) (a small step after the first is skipped when its best "
             f"frontier node's path probability is below it; 0: never), got {self.min_step_p!r}")
        for name in ("fuse_prompt", "stop_on_relax_zero", "first_step_fallback", "mid_scores_all"):
            need(isinstance(getattr(self, name), bool), f"{name} must be True or False, got {getattr(self, name)!r}")
        need(self.matcher in MATCHERS, f"matcher must be 'index' (the n-gram index's latest continuation per token) or "
             f"'release' (every continuation, scored by the target's prompt log-probs), got {self.matcher!r}")
        need(self.frontier_order in FRONTIER_ORDERS, f"frontier_order must be 'score' (top-W by path score) or 'match' "
             f"(the release: n-gram match size, then path score), got {self.frontier_order!r}")
        if self.matcher == "release":
            need(not self.fuse_prompt, "matcher='release' scores n-gram tokens by the target's log-probs over the prompt, "
                 "which only a prompt forward of its own gives: set fuse_prompt=False (or use growth 'release')")
            need(self.small == "ngram" and self.expansion == "per_parent" and self.ngram_chain and self.lookup == 0,
                 "matcher='release' is the release's n-gram drafter: it needs small='ngram', expansion='per_parent', "
                 "ngram_chain=True and lookup=0")
        need(self.lookback is None or (isinstance(self.lookback, int) and self.lookback >= 0),
             f"lookback must be an integer >= 0 (depths above the frontier a mid step may reselect) or None "
             f"(every node the mid drafter has not scored), got {self.lookback!r}")

    def check_run(self) -> None:
        """The drafters, pruning, sampling, the clock and the schedule."""
        parse_small(self.small)
        need(isinstance(self.recycle_below, int) and not isinstance(self.recycle_below, bool) and self.recycle_below >= 0,
             f"recycle_below must be an integer >= 0 (recycled candidates only under frontier nodes whose n-gram "
             f"match is shorter; 0: everywhere), got {self.recycle_below!r}")
        need(self.prune in PRUNES, f"prune must be 'auto' (chosen for the device), 'topk' (the paper) or 'value' "
             f"(per-round, cost-aware), got {self.prune!r}")
        need(
            isinstance(self.ngram_max, int) and isinstance(self.ngram_min, int) and 1 <= self.ngram_min <= self.ngram_max,
            f"n-gram sizes must satisfy 1 <= ngram_min <= ngram_max, got {self.ngram_min}..{self.ngram_max}",
        )
        need(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}")
        need(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        need(isinstance(self.top_k, int) and self.top_k >= 0, f"top_k must be an integer >= 0, got {self.top_k}")
        need(self.call_budget is None or self.call_budget >= 0, "call_budget must be >= 0 or None")
        need(not hasattr(self.clock, "target_ms"),
             f"clock takes a profile's name ('wall', 'a100-paper' or a JSON file), not the DeviceProfile "
             f"{getattr(self.clock, 'name', '')!r}: pass it to the decoder as TreeGraftDecoder(pair, config, profile=...)")
        need(isinstance(self.clock, str) and self.clock != "",
             f"clock must be 'wall', a profile name such as 'a100-paper' or a profile JSON file, got {self.clock!r}")
        if isinstance(self.schedule, (str, list, tuple)):
            parse_mask(self.schedule, self.depth)  # raises on a bad mask
        else:
            need(hasattr(self.schedule, "decide"), "schedule must be a name, a 0/1 mask, or an object with decide(ctx)")

    @property
    def node_cap(self) -> int:
        """The drafting cap on live nodes, root included (the release's 1 + k + D * W * k)."""
        if self.max_nodes is not None:
            return self.max_nodes
        return 1 + self.children + self.depth * self.width * self.children

    @property
    def growth(self) -> str:
        """The name of the growth rule in `GROWTHS` this config's growth fields match, else "custom"
        (`children`, `max_nodes` and the n-gram sizes are not part of the name)."""
        for name, rule in GROWTHS.items():
            if all(getattr(self, f) == rule[f] for f in GROWTH_FIELDS):
                return name
        return "custom"

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def schedule_name(self) -> str:
        mask = parse_mask(self.schedule, self.depth)
        if mask is not None:
            return "".join(map(str, mask))
        if isinstance(self.schedule, str):
            return self.schedule
        return getattr(self.schedule, "name", type(self.schedule).__name__)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["schedule"] = self.schedule_name
        return d


def stored_settings(decode: dict) -> dict:
    """Settings stored by an earlier version (trajectories, schedulers, replays) as `DecodeConfig` takes them:
    the removed field `extra` (always empty in what was stored) is left out."""
    decode = dict(decode)
    if decode.pop("extra", None):
        raise TreeGraftError("these stored settings hold a non-empty 'extra', a DecodeConfig field that no longer "
                             "exists: collect them again")
    return decode


def preset(name: str = "speed", **overrides) -> DecodeConfig:
    """The `DecodeConfig` of preset `name` ("speed": the defaults; "full"; "release": the authors' release),
    with `overrides` on top (any DecodeConfig field)."""
    if name not in PRESETS:
        raise TreeGraftError(f"unknown preset {name!r}; the presets are {', '.join(PRESETS)}")
    return DecodeConfig(**{**PRESETS[name], **overrides})
