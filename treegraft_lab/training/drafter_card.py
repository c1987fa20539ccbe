"""Measurements of a drafter against its target: agreement, chain acceptance, cost ratios.

- agreement: greedy top-1 agreement, teacher-forced on the target's own greedy continuations of
  the `eval` prompts: at every continuation position, argmax(drafter) == argmax(target);
  per prompt category and overall (pooled over positions).
- chain acceptance (k = 4, greedy): simulated on the same teacher-forced continuations. With
  greedy verification a drafted token can only be accepted if all earlier drafted tokens of the
  round were accepted, in which case the drafter's context equals the true continuation; so the
  number of accepted tokens of a round starting at position t is the number of consecutive
  positions t, t+1, ... (at most 4) where argmax(drafter) == argmax(target). Rounds advance by
  accepted + 1 (the bonus token). Reported: mean accepted drafted tokens per round, and mean
  tokens per round including the bonus.
- cost ratios: drafter forward time / target forward time, bf16, same inputs, medians of
  repetitions alternating target and drafter: 1 new token on a 512-token cached context, and a 64-node tree chunk
  (4D float tree mask, depth position ids) on the same cached context.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from treegraft_lab.measure import cuda_devices, timed
from treegraft_lab.paths import cache_root as cache_dir


def tree_inputs(n: int, ctx: int, seed: int = 0, dtype: torch.dtype = torch.bfloat16
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """A random tree of `n` nodes below a `ctx`-token context: 4D float mask and position ids."""
    g = torch.Generator().manual_seed(seed)
    parent = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
    depth = [0] * n
    allowed = torch.zeros(n, ctx + n, dtype=torch.bool)
    allowed[:, :ctx] = True
    for i in range(n):
        j = i
        while j >= 0:
            allowed[i, ctx + j] = True
            j = parent[j]
        depth[i] = 0 if parent[i] < 0 else depth[parent[i]] + 1
    mask = torch.zeros(1, 1, n, ctx + n, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask, torch.tensor([[ctx + d for d in depth]])


class _Timer:
    """One model with a prefilled cache, timing forwards of new tokens (cache cropped back)."""

    @torch.no_grad()
    def __init__(self, model: Any, ctx_ids: torch.Tensor, new_ids: torch.Tensor, tree: bool) -> None:
        from transformers import DynamicCache

        self.model, self.new = model, new_ids
        self.cache = DynamicCache(config=model.config)
        model(input_ids=ctx_ids, past_key_values=self.cache, use_cache=True)
        ctx, n = ctx_ids.shape[1], new_ids.shape[1]
        if tree:
            self.mask, self.pos = tree_inputs(n, ctx, dtype=model.model.embed_tokens.weight.dtype)
        else:
            self.mask, self.pos = None, torch.arange(ctx, ctx + n)[None]

    @torch.no_grad()
    def __call__(self) -> float:
        _, dt = timed(lambda: self.model(input_ids=self.new, past_key_values=self.cache, position_ids=self.pos,
                                         attention_mask=self.mask, use_cache=True), devices=cuda_devices(self.model))
        self.cache.crop(-self.new.shape[1])
        return dt


def cost_ratios(target: Any, drafter: Any, reps: int = 15, ctx: int = 512, seed: int = 0
                ) -> dict[str, Any]:
    """Medians of side-by-side timings, alternating target and drafter at every repetition
    (so load changes on a shared machine hit both alike): 1 token and a 64-node tree chunk."""
    g = torch.Generator().manual_seed(seed)
    vocab = target.config.vocab_size
    ctx_ids = torch.randint(100, vocab, (1, ctx), generator=g)
    res: dict[str, Any] = {}
    for n, key in ((1, "1"), (64, "64")):
        new = torch.randint(100, vocab, (1, n), generator=g)
        tt, td = _Timer(target, ctx_ids, new, n > 1), _Timer(drafter, ctx_ids, new, n > 1)
        for _ in range(2):  # warm-up
            tt(), td()
        times_t, times_d = [], []
        for _ in range(reps):
            times_t.append(tt())
            times_d.append(td())
        mt, md = statistics.median(times_t), statistics.median(times_d)
        res[f"cost_ratio_{key}"] = md / mt
        res[f"target_ms_{key}"] = mt * 1000
        res[f"drafter_ms_{key}"] = md * 1000
    return res


@torch.no_grad()
def eval_continuations(target: Any, tok: Any, prompts: list[dict[str, Any]], max_new: int,
                       batch: int = 16) -> list[dict[str, Any]]:
    """The target's greedy continuations of the prompts (cached on disk by content hash)."""
    from treegraft_lab.training.drafter_distill import chat_ids, generate_records

    key = hashlib.sha256(json.dumps([p["messages"] for p in prompts], sort_keys=True).encode()
                         + f"{max_new}".encode()).hexdigest()[:16]
    path = cache_dir() / "distill" / f"eval-cont-{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    ids = [chat_ids(tok, p["messages"], 1024) for p in prompts]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[dict[str, Any]] = [{} for _ in ids]
    for s in range(0, len(order), batch):
        chunk = order[s:s + batch]
        recs = generate_records(target, tok, [ids[i] for i in chunk], sample=False, max_new=max_new,
                                temperature=1.0, topk=1, seed=0)
        for i, r in zip(chunk, recs):
            out[i] = {"category": prompts[i]["category"], "prompt": ids[i], "gen": r["gen"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


@torch.no_grad()
def agreement(target: Any, drafter: Any, conts: list[dict[str, Any]], k: int = 4) -> dict[str, Any]:
    """Teacher-forced top-1 agreement (per category, overall) and simulated chain acceptance."""
    per_cat: dict[str, list[int]] = {}
    hits_all: list[int] = []
    covered: list[bool] = []
    sub_ids = getattr(drafter.lm_head, "token_ids", None)
    acc_rounds: list[int] = []
    for c in conts:
        seq = torch.tensor([list(c["prompt"]) + list(c["gen"])])
        p, n = len(c["prompt"]), len(c["gen"])
        if n < 1:
            continue
        lt = target(input_ids=seq, use_cache=False, logits_to_keep=n + 1).logits[0, :n]
        ld = drafter(input_ids=seq, use_cache=False, logits_to_keep=n + 1).logits[0, :n]
        assert seq.shape[1] == p + n
        hits = (lt.argmax(-1) == ld.argmax(-1)).int().tolist()
        if sub_ids is not None:
            covered.extend(torch.isin(lt.argmax(-1), sub_ids).tolist())
        per_cat.setdefault(c["category"], []).extend(hits)
        hits_all.extend(hits)
        t = 0
        while t < n:
            a = 0
            while a < k and t + a < n and hits[t + a]:
                a += 1
            acc_rounds.append(a)
            t += a + 1
    return {
        "agreement": float(np.mean(hits_all)) if hits_all else float("nan"),
        "agreement_per_category": {c: float(np.mean(h)) for c, h in sorted(per_cat.items())},
        "positions": len(hits_all),
        "positions_per_category": {c: len(h) for c, h in sorted(per_cat.items())},
        "sub_vocab_coverage": float(np.mean(covered)) if covered else 1.0,
        "chain_k": k,
        "chain_mean_accepted": float(np.mean(acc_rounds)) if acc_rounds else float("nan"),
        "chain_mean_tokens_per_round": float(np.mean(acc_rounds)) + 1 if acc_rounds else float("nan"),
    }


def per_category(prompts: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first `n` prompts of each category, in the suite's order."""
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        if seen.get(p["category"], 0) < n:
            out.append(p)
            seen[p["category"]] = seen.get(p["category"], 0) + 1
    return out


def measure(folder: Path, max_new: int = 128, reps: int = 15, limit: int = 0,
            threads: int = 0, per_cat: int = 0) -> dict[str, Any]:
    """Load target + drafter from `folder`, measure everything, return one JSON-able dict.

    The pocket drafter is measured in bf16; a mid derived from the target (`treegraft_lab.zoo.derived`:
    int8, the target itself, a layer cut) in float32, the dtype its int8 kernels take and the
    regime map's replays run in. `per_cat`: only the first N eval prompts of each category."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from treegraft_lab.training.drafter_distill import eval_prompts
    from treegraft_lab.zoo import derived
    from treegraft_lab.zoo.drafter import load_drafter
    from treegraft_lab.zoo.target import ensure_target

    spec = derived.read_spec(folder) if derived.is_derived(folder) else None
    if threads:
        torch.set_num_threads(threads)
    tpath = ensure_target()
    tok = AutoTokenizer.from_pretrained(tpath)
    dtype = torch.float32 if spec else torch.bfloat16
    target = AutoModelForCausalLM.from_pretrained(tpath, dtype=dtype).eval()
    drafter = derived.build_mid(target, spec) if spec else load_drafter(target, folder)
    prompts, source = eval_prompts()
    if per_cat:
        prompts = per_category(prompts, per_cat)
    if limit:
        prompts = prompts[:limit]
    t0 = time.time()
    conts = eval_continuations(target, tok, prompts, max_new)
    res: dict[str, Any] = {"drafter": str(folder), "eval_prompts": source, "n_prompts": len(prompts),
                           "max_new_tokens": max_new}
    res.update(agreement(target, drafter, conts))
    res.update(cost_ratios(target, drafter, reps=reps))
    if spec:
        n = target.config.num_hidden_layers
        res.update({"kind": spec["kind"], "layers": spec.get("layers") or list(range(n)), "sub_vocab": None,
                    "lora_rank": None, "per_category": per_cat})
    else:
        cfg = json.loads((Path(folder) / "config.json").read_text())
        res.update({"layers": cfg["layers"], "sub_vocab": cfg["sub_vocab"], "lora_rank": cfg["lora_rank"]})
    res.update({"threads": torch.get_num_threads(), "dtype": str(dtype).removeprefix("torch."),
                "measure_seconds": round(time.time() - t0, 1)})
    return res


def derived_card_markdown(name: str, res: dict[str, Any], spec: dict[str, Any], command: str) -> str:
    """MODEL_CARD.md text of a mid derived from the target (`treegraft_lab.zoo.derived`)."""
    what = {"int8": "the target with the q/k/v/o, gate and up projections of every layer quantised to int8 by "
                    "torch's dynamic quantisation (per-output-channel int8 weights, activations quantised to 8 bits "
                    "per forward); down_proj and the tied head stay float32. CPU only",
            "self": "a copy of the target itself: the idealised mid drafter (agreement 1) that bounds the regime map "
                    "from above on the modelled clock; on the wall clock it costs a full target forward",
            "layers": f"the target's own layers {spec.get('layers')} (a layer-skip cut, untrained), the target's "
                      "final norm and full tied head"}[spec["kind"]]
    cats = "\n".join(f"| {c} | {v:.3f} | {res['positions_per_category'][c]} |"
                     for c, v in res["agreement_per_category"].items())
    return f"""# {name} mid drafter (derived from SmolLM2-135M-Instruct at load time)

{what[0].upper() + what[1:]}.

## How it is made

Nothing is trained or stored but `config.json` (kind `{spec['kind']}`): `load_pair("{name}")` builds it from
the loaded target (`treegraft_lab.zoo.derived.build_mid`), offline, in a few seconds.

## Measured

    {command}

Eval prompts: `{res['eval_prompts']}`, {res['n_prompts']} prompts (the first {res.get('per_category') or 'all'} of
each category, first user turn), the target's greedy continuations of up to {res['max_new_tokens']} tokens,
{res['positions']} positions, teacher-forced; {res['dtype']} (target and drafter), {res['threads']} thread(s).

| category | greedy top-1 agreement | positions |
|---|---|---|
{cats}
| **overall** | **{res['agreement']:.3f}** | {res['positions']} |

- Chain speculative decoding, k = {res['chain_k']}, greedy (simulated on the teacher-forced continuation): mean
  accepted drafted tokens per round {res['chain_mean_accepted']:.2f}, tokens per round incl. the bonus token
  {res['chain_mean_tokens_per_round']:.2f}.
- Cost ratio drafter / target (transformers' stock forwards, medians, side by side): 1 new token on a
  512-token cached context {res['cost_ratio_1']:.3f} ({res['drafter_ms_1']:.1f} / {res['target_ms_1']:.1f} ms);
  64-node tree chunk {res['cost_ratio_64']:.3f} ({res['drafter_ms_64']:.1f} / {res['target_ms_64']:.1f} ms).
  Timed on a 2-core machine shared with other jobs: expect noise.

## Files
- `config.json`: the kind and its settings (`treegraft_lab.zoo.derived`).
- `card.json`: the measured figures above.
"""


def _segments(record: dict[str, Any]) -> str:
    """Markdown lines for the recorded (re)starts of a resumed distillation, if any."""
    segs = record.get("segments") or []
    if not segs:
        return ""
    lines = "".join(f"  - from step {g['from_step']} ({g['from_elapsed_s'] / 60:.0f} min in): --minutes {g['minutes']:g}, "
                    f"--threads {g['threads']}, --gen-frac {g['gen_frac']:g}, --max-context {g['max_context']}, "
                    f"lr {g['lr']:g}, ce weight {g['ce_weight']:g}\n" for g in segs)
    return "- Recorded restarts (each resumed the cached checkpoint and corpus with these knobs):\n" + lines


def model_card_markdown(name: str, res: dict[str, Any], record: dict[str, Any], command: str) -> str:
    """MODEL_CARD.md text from the training record and the measured figures."""
    cfg = record.get("config", {})
    cats = agreement_rows(res)
    return f"""# {name} mid drafter (pocket drafter of SmolLM2-135M-Instruct)

A `transformers.LlamaForCausalLM` rebuilt at load time from the target SmolLM2-135M-Instruct plus
the files of this folder (`treegraft_lab.zoo.drafter.load_drafter`): target layers
{cfg.get('layers')} (in that order), each with rank-{cfg.get('rank')} low-rank deltas on all seven
projections and retrained RMSNorm weights, the target's final norm (retrained), and the target's
tied embedding (shared, not stored). The head is a frequency-ranked sub-vocabulary head over the
{cfg.get('sub_vocab')} most frequent tokens of the target's own generations (plus a learned bias);
logits of other tokens are `finfo(dtype).min / 2` in a full {res.get('vocab', 49152)}-wide output.

""" + how_it_was_made(record, command) + pocket_measured(name, res, cats) + POCKET_FILES


def agreement_rows(res: dict[str, Any]) -> str:
    """The agreement table's rows, one per category: agreement and positions."""
    return "\n".join(f"| {c} | {v:.3f} | {res['positions_per_category'][c]} |"
                     for c, v in res["agreement_per_category"].items())


def how_it_was_made(record: dict[str, Any], command: str) -> str:
    """The model card's "How it was made" section: data, corpus, loss and run, from the training record."""
    cfg = record.get("config", {})
    return f"""## How it was made

    {command}

- Data: self-distillation on the target's own continuations (chat template, up to
  {cfg.get('max_new_tokens')} new tokens) of `{record.get('prompt_source')}` prompts
  ({record.get('n_prompts')} prompts; each once greedy, then sampled at temperature
  {cfg.get('temperature')}), plus {int(100 * cfg.get('local_frac', 0))}% of the sampled batches
  from local chat requests built from Python stdlib sources and docstrings. No `eval` prompt was
  used ({record.get('records_dropped_eval_overlap')} records overlapping eval text dropped).
- Corpus: {record.get('corpus_records')} continuations, {record.get('corpus_gen_tokens')} generated
  tokens, with the target's top-{cfg.get('topk')} logits per position.
- Loss: KL(target top-{cfg.get('topk')} || drafter) + {cfg.get('ce_weight')} x CE on the target's
  argmax, over a {cfg.get('train_sub_vocab')}-token training sub-vocabulary; AdamW, lr
  {cfg.get('lr')} (warm-up, cosine to 10% over the time budget), grad clip 1.0.
- Steps: {record.get('step')}; tokens seen (loss positions): {record.get('tokens_seen')};
  wall time {record.get('elapsed', 0) / 60:.1f} min ({record.get('gen_time', 0) / 60:.1f} generating,
  {record.get('train_time', 0) / 60:.1f} training) on {cfg.get('threads')} CPU thread(s) of a shared
  2-core machine; seed {cfg.get('seed')}.
{_segments(record)}- Sub-vocabulary coverage of the corpus' target top-1 tokens: {record.get('sub_vocab_coverage_of_target_top1', float('nan')):.4f}.

"""


def pocket_measured(name: str, res: dict[str, Any], cats: str) -> str:
    """The card's "Measured" section: agreement per category (rows `cats`), chain acceptance, costs."""
    return f"""## Measured (`treegraft-lab zoo card {name} --json`)

Eval prompts: `{res['eval_prompts']}`, {res['n_prompts']} prompts (first user turn), target greedy
continuations of up to {res['max_new_tokens']} tokens, {res['positions']} positions, teacher-forced.

| category | greedy top-1 agreement | positions |
|---|---|---|
{cats}
| **overall** | **{res['agreement']:.3f}** | {res['positions']} |

- The target's top-1 token lies inside the head's sub-vocabulary at {res['sub_vocab_coverage']:.3f}
  of the eval positions (the rest cannot be matched).
- Chain speculative decoding, k = {res['chain_k']}, greedy (simulated on the teacher-forced
  continuation): mean accepted drafted tokens per round {res['chain_mean_accepted']:.2f}, tokens per
  round incl. the bonus token {res['chain_mean_tokens_per_round']:.2f}.
- Cost ratio drafter / target (bf16, {res['threads']} threads, medians, side by side):
  1 new token on a 512-token cached context {res['cost_ratio_1']:.3f}
  ({res['drafter_ms_1']:.1f} / {res['target_ms_1']:.1f} ms); 64-node tree chunk on the same context
  {res['cost_ratio_64']:.3f} ({res['drafter_ms_64']:.1f} / {res['target_ms_64']:.1f} ms).
  Timings were taken on a 2-core machine shared with other jobs: expect noise.

"""


POCKET_FILES = """## Files
- `config.json`: layers, rank/scale, sub-vocabulary size, target dims and weight fingerprint.
- `adapters.safetensors`: low-rank deltas (bf16), norm weights, sub-vocabulary ids and head bias.
- `training_record.json`: the full training record (config, corpus, steps, history).
"""
