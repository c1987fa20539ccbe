"""DecodeConfig: every knob of one decoding run, with the paper's defaults and validation."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.presets import FULL_GROWTH, GROWTHS, PRESETS, RELEASE_RULES, SPEED  # noqa: F401  (GROWTHS, RELEASE_RULES: re-exported)

NAMED_SCHEDULES = ("auto", "small", "mid", "adaptive", "oracle", "rule:match", "rule:score")
PRUNES = ("auto", "topk", "value")
RULES = ("rule:match", "rule:score")  # optionally with its value: "rule:match=3", "rule:score=0.3"
EXPANSIONS = ("per_parent", "global")
# The named tree-growth rules (`presets.GROWTHS`, each every field of GROWTH_FIELDS): "release" is
# replayed round for round by tests/test_release_replay.py.
GROWTH_FIELDS = tuple(FULL_GROWTH)
MATCHERS = ("index", "release")
FRONTIER_ORDERS = ("score", "match")


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
    """One decoding run. The defaults are the speed preset (`presets.SPEED`), what the command line
    means with no flags: the paper's D, W, B_ver and n-gram sizes, the "lookup" growth, the n-gram and
    Token Recycling small drafters, and schedule="auto", prune="auto": the decoder picks them for its
    pair and device profile and says so in one line (adaptive where a scheduler is trained for them,
    else "small"; "value" where a verified node costs, else "topk"; `schedule.choice.resolve_auto`).
    Ask for a schedule by name ("10101") to see grafting in every tree; `preset("release")` is
    the release's.

    depth: draft steps per round (D). width: frontier width W (the nodes a step expands; the next
    frontier is the top-W of the nodes a step grew). Tree growth (growth "full"
    below; "lookup", the default, adds prompt lookup's chain; "release" the release's own rules, listed below):
    expansion "per_parent" gives EACH frontier parent its own top-`children` children (W = k = 10:
    up to 100 new nodes a step); "global" keeps only the global top-W children over the whole
    frontier (at most W new nodes a step: small trees, for devices where every node costs).
    ngram_chain: each n-gram continuation is added as a chain of up to max(1, ngram_max - (step-1))
    tokens (`chain_len`: a fixed length instead, e.g. 10 as in prompt lookup). lookup: at the
    round's first small step the root also gets, as one chain, the up to `lookup` tokens HF prompt
    lookup would draft (its matching rule: the last 2 committed tokens, else the last one, at their
    earliest occurrence), so the tree holds prompt lookup's draft and may run deeper than D; every
    chain token is scored like any n-gram node (0: off, the release). chain_frontier: that chain's
    deepest node joins the next frontier candidates (N_k), so later small steps may extend it.
    min_step_p: a small step after the first is skipped (nothing drafted, nothing priced) when the
    best node it would expand has path probability exp(s) below this (0: never; release). max_nodes: drafting cap on live nodes (None: 1 + children + depth * width * children, 511
    by default); the tree is cut only once, to the budget. lookback: at a mid step the reselection
    pool is every live node whose depth is within `lookback` depths above the deepest frontier depth
    (5 with D = 5: every depth up to the frontier, root included); None: every live node the mid
    drafter has not scored (the paper's text).
    The authors' release (growth "release", `RELEASE_RULES`) runs six more rules, each a field:
    fuse_prompt: the target's prompt rides in the first round's tree forward (True: one forward
    less a generation) or is prefilled in a forward of its own whose token starts round 1 (False:
    the release, and its count of target forwards). stop_on_relax_zero: an n-gram parent whose
    matches give fewer than `children` distinct next tokens (its existing children included) is
    ended: its matched chains still go into the tree, but none of its children joins the next
    frontier; a round's growth stops when the frontier is empty or the tree reaches the drafting
    cap (the release's evaluator hard-codes it). first_step_fallback: when step 1 is an n-gram step
    and the root gets no child, it gets one, the context's most frequent token (ties: the latest,
    then the smallest id) with path score 0, and the round's growth ends there. matcher: "index"
    (the n-gram index: per first token one chain, from its latest occurrence, scored by counts) or
    "release" (every distinct continuation of every earlier occurrence of the longest matching
    n-grams becomes a chain of the step's chain length, most specific match then latest first;
    the first token is scored by the target's log-prob of it at the matched position of the
    prompt, read from the prompt's own forward (its top `children`; outside them the last minus 5;
    0 in generated text), the chain's other tokens are unscored (-inf) until a mid call scores
    them; needs fuse_prompt=False). frontier_order: the next frontier is the top-W of a step's new
    nodes by path score ("score") or, as the release, every child of a parent the step expanded
    (and not ended) ranked by the n-gram match size that proposed it (mid children: 0), then path
    score, then age, cut to `width` after step 1 ("match"). mid_scores_all: a mid call forwards
    every live node it has not scored (not only the reselection pool and its ancestors) and its
    log-probs replace every edge score of the tree, as the release's whole-tree mid forward does.
    budget: non-root nodes the target verifies (B_ver), or "auto" to pick
    it from a measured cost curve. prune: "auto" (see above), "topk" keeps the budget's best nodes by path score (the
    paper); "value" keeps, each round, only the best nodes whose calibrated acceptance chance pays
    for their verification time on this device (at most `budget`; budget.ValuePruner). ngram_max/ngram_min: n-gram match sizes of the small drafter.
    expanded_graft (EG) and non_destructive (ND) switch the paper's WHERE and HOW mechanisms.
    small: the small drafter(s): "ngram" (the release), "recycling" (Token Recycling's adjacency
    matrix), "suffix" (a suffix automaton's longest match) or a "+"-joined combination such as
    "ngram+suffix" (`retrieval`). recycle_below: where "ngram" and "recycling" draft together,
    recycled candidates go only under frontier nodes whose longest n-gram match is shorter than this
    many tokens (default 2: where the text has not repeated itself; 0: under every node). schedule: "auto" (see above), "small", "mid", a 0/1 mask such as "10101", "adaptive",
    "oracle", a rule ("rule:match": call the mid drafter while the context match is shorter than
    tau tokens; "rule:score": while the best small path's probability is below a threshold; the
    value fitted on the train split, or given as "rule:match=3"), or a policy
    object with `decide(ctx) -> bool`. call_budget: most mid calls per round (None = no cap).
    mid_in_first_round: whether a policy schedule (adaptive, a rule, a custom policy; not a fixed
    mask) may call the mid drafter in a generation's first round. Off by default: there the
    committed text ends in the prompt's chat template, so the context signals read alike for every
    prompt, and a mid call pays the mid drafter's whole-prompt prefill, which the modelled clock
    leaves out; on the regime map (T_mid / T_tgt 0.21) the calls the family scheduler made there
    cost the two copying prompts a round each.
    clock: the name of the costs every time-weighing decision reads (the scheduler's inputs, value
    pruning, budget "auto", the oracle) and each round is priced with: "wall" (default) = this
    device's measured profile, or a profile name ("a100-paper") or JSON file. Only the name lives
    here: `measure.resolve(clock, pair)` turns it into a `costs.DeviceProfile` (measuring "wall" once,
    then caching it), which is handed to the decoder as `TreeGraftDecoder(pair, config, profile=...)`;
    a decoder handed none reads it itself, never measuring. Wall time is always measured and reported;
    with another profile the run is also reported "modelled on <profile>" (it still runs the real
    models and stays lossless).
    """

    depth: int = SPEED["depth"]
    width: int = SPEED["width"]
    expansion: str = SPEED["expansion"]
    children: int = SPEED["children"]
    ngram_chain: bool = SPEED["ngram_chain"]
    chain_len: int | None = SPEED["chain_len"]
    lookup: int = SPEED["lookup"]
    chain_frontier: bool = SPEED["chain_frontier"]
    min_step_p: float = SPEED["min_step_p"]
    fuse_prompt: bool = SPEED["fuse_prompt"]
    stop_on_relax_zero: bool = SPEED["stop_on_relax_zero"]
    first_step_fallback: bool = SPEED["first_step_fallback"]
    matcher: str = SPEED["matcher"]
    frontier_order: str = SPEED["frontier_order"]
    mid_scores_all: bool = SPEED["mid_scores_all"]
    max_nodes: int | None = None
    lookback: int | None = SPEED["lookback"]
    budget: int | str = SPEED["budget"]
    small: str = SPEED["small"]
    recycle_below: int = SPEED["recycle_below"]
    prune: str = SPEED["prune"]
    ngram_max: int = 5
    ngram_min: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    expanded_graft: bool = True
    non_destructive: bool = True
    schedule: Any = SPEED["schedule"]
    call_budget: int | None = None
    mid_in_first_round: bool = False
    seed: int | None = None
    scheduler_path: str | None = None
    clock: str = "wall"
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise TreeGraftError(msg)

        need(isinstance(self.depth, int) and self.depth >= 1, f"depth must be an integer >= 1, got {self.depth!r}")
        need(isinstance(self.width, int) and self.width >= 1, f"width must be an integer >= 1, got {self.width!r}")
        need(self.expansion in EXPANSIONS,
             f"expansion must be 'per_parent' (the release: top-k children for each frontier parent) or 'global' "
             f"(the global top-W children of the frontier), got {self.expansion!r}")
        need(isinstance(self.children, int) and self.children >= 1, f"children must be an integer >= 1, got {self.children!r}")
        need(isinstance(self.ngram_chain, bool), f"ngram_chain must be True or False, got {self.ngram_chain!r}")
        need(self.chain_len is None or (isinstance(self.chain_len, int) and self.chain_len >= 1),
             f"chain_len must be an integer >= 1 (tokens per n-gram chain) or None (the release's lengths), "
             f"got {self.chain_len!r}")
        need(isinstance(self.lookup, int) and not isinstance(self.lookup, bool) and self.lookup >= 0,
             f"lookup must be an integer >= 0 (tokens of prompt lookup's draft grafted under the root at the "
             f"first small step; 0: off), got {self.lookup!r}")
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
        need(self.max_nodes is None or (isinstance(self.max_nodes, int) and self.max_nodes >= 2),
             f"max_nodes (the drafting cap, root included) must be an integer >= 2 or None, got {self.max_nodes!r}")
        need(self.lookback is None or (isinstance(self.lookback, int) and self.lookback >= 0),
             f"lookback must be an integer >= 0 (depths above the frontier a mid step may reselect) or None "
             f"(every node the mid drafter has not scored), got {self.lookback!r}")
        if self.budget != "auto":
            need(
                isinstance(self.budget, int) and self.budget >= 1,
                f"budget must be an integer >= 1 (non-root nodes verified) or 'auto', got {self.budget!r}",
            )
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


def preset(name: str = "speed", **overrides) -> DecodeConfig:
    """The `DecodeConfig` of preset `name` ("speed": the defaults; "full"; "release": the authors' release),
    with `overrides` on top (any DecodeConfig field)."""
    if name not in PRESETS:
        raise TreeGraftError(f"unknown preset {name!r}; the presets are {', '.join(PRESETS)}")
    return DecodeConfig(**{**PRESETS[name], **overrides})
