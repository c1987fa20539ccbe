"""Self-distillation of the pocket drafter: the target's own continuations, then KL training.

One process interleaves two jobs on the CPU, so a usable drafter exists from the first minutes:

1. corpus: batches of `train`-split prompts (chat template, left padding) decoded by the target,
   alternately greedy and sampled (temperature 0.8); for every generated position the target's
   top-K raw logits are kept (they come for free from the decoding), cached as `.npz` shards
   under `~/.cache/treegraft_lab/distill/corpus/`;
2. training: low-rank (LoRA) deltas on a subset of the target's layers plus the RMSNorm weights
   and a head bias, loss = KL(teacher top-K || drafter) + 0.5 * CE(teacher argmax) on generated
   positions, over a frequency-ranked sub-vocabulary.

Checkpoints (resumable: adapters, optimiser, step, elapsed time, RNG) go to the cache folder; the
artifact (`config.json`, `adapters.safetensors`, `training_record.json`) is exported to `--out`
at every checkpoint. Never trains on `eval` prompts: a corpus record whose prompt overlaps an
eval prompt is dropped when the prompt suite is available.
"""

from __future__ import annotations

import glob
import json
import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import cache_root as cache_dir
from treegraft_lab.zoo import drafter as dr
from treegraft_lab.zoo.target import ensure_target

DEFAULT_LAYERS = [0, 1, 2, 24, 25, 26, 27, 28, 29]
SUITE = "treegraft-suite"


@dataclass
class DistillConfig:
    """Knobs of one distillation run (all recorded in the training record)."""

    out: str
    layers: list[int] = field(default_factory=lambda: list(DEFAULT_LAYERS))
    rank: int = 64
    alpha: float = 64.0
    sub_vocab: int = 8192
    train_sub_vocab: int = 16384
    minutes: float = 90.0
    steps: int = 0  # 0: until --minutes are spent
    seed: int = 0
    lr: float = 1e-3
    batch_tokens: int = 3072
    max_context: int = 320
    gen_batch: int = 32
    max_new_tokens: int = 128
    temperature: float = 0.8
    topk: int = 32
    gen_frac: float = 0.5
    local_frac: float = 0.25
    checkpoint_minutes: float = 4.0
    threads: int = 1
    ce_weight: float = 0.5
    work: str = ""

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


# ---------------------------------------------------------------- prompts


def _local_prompts(seed: int) -> list[dict[str, Any]]:
    """Chat requests built from local text (Python stdlib sources and docstrings)."""
    rng = random.Random(seed)
    files = sorted(f for f in glob.glob("/usr/lib/python3*/*.py") if "test" not in f)
    files += sorted(glob.glob("/usr/lib/python3*/[a-z]*/*.py"))[:400]
    code_asks = [
        "Explain what this code does:\n\n```python\n{x}\n```",
        "Complete this Python code:\n\n```python\n{x}\n```",
        "Write a docstring for the following code:\n\n```python\n{x}\n```",
        "Find possible bugs in this code and suggest fixes:\n\n```python\n{x}\n```",
        "Rewrite this code to be more readable:\n\n```python\n{x}\n```",
        "Write unit tests for this code:\n\n```python\n{x}\n```",
    ]
    text_asks = [
        "Summarize the following text in a few sentences:\n\n{x}",
        "Explain this passage in simple words:\n\n{x}",
        "Rewrite this text more concisely:\n\n{x}",
        "What are the key points of this text?\n\n{x}",
        "Answer briefly: what does this describe?\n\n{x}",
    ]
    out: list[dict[str, Any]] = []
    for f in files:
        try:
            src = Path(f).read_text(errors="ignore")
        except OSError:
            continue
        for doc in re.findall(r'"""(.{200,1500}?)"""', src, flags=re.S)[:3]:
            ask = rng.choice(text_asks)
            out.append({"category": "local-text", "messages": [
                {"role": "user", "content": ask.format(x=doc.strip())}]})
        for _ in range(2):
            if len(src) < 400:
                break
            i = rng.randrange(0, len(src) - 300)
            i = src.rfind("\n", 0, i) + 1
            snip = src[i:i + rng.randint(250, 900)]
            out.append({"category": "local-code", "messages": [
                {"role": "user", "content": rng.choice(code_asks).format(x=snip)}]})
    topics = ["sorting algorithms", "HTTP caching", "binary search", "photosynthesis", "inflation",
              "the water cycle", "recursion", "unit testing", "time management", "the French Revolution",
              "neural networks", "SQL joins", "climate change", "healthy sleep", "git branching",
              "regular expressions", "the solar system", "compound interest", "public speaking",
              "hash tables", "linked lists", "REST APIs", "the immune system", "volcanoes"]
    asks = ["Explain {t} to a beginner.", "Write a short essay about {t}.", "Give five facts about {t}.",
            "What are common mistakes people make with {t}?", "Write a Python example related to {t}.",
            "Compare two approaches to {t} and give pros and cons.", "Write a short story involving {t}.",
            "Create a quiz with three questions about {t}."]
    for t in topics:
        for a in asks:
            out.append({"category": "local-chat", "messages": [{"role": "user", "content": a.format(t=t)}]})
    rng.shuffle(out)
    return out


def suite_split(split: str) -> list[dict[str, Any]] | None:
    """The project's prompt suite split as chat records, or None when it is not available; the
    validation split is refused (no drafter is distilled on it)."""
    from treegraft_lab.prompts import refuse_validation, tuning_prompts

    refuse_validation(split, "drafter distillation")
    try:
        items = tuning_prompts(SUITE, split=split, purpose="drafter distillation")
    except Exception:  # noqa: BLE001 - the suite may not exist yet
        return None
    return [_as_record(it) for it in items] or None


def _as_record(it: Any) -> dict[str, Any]:
    """Normalise one prompt of the suite (str, dict or object) to {category, messages}."""
    get = (lambda k, d=None: it.get(k, d)) if isinstance(it, dict) else (lambda k, d=None: getattr(it, k, d))
    if isinstance(it, str):
        return {"category": "default", "messages": [{"role": "user", "content": it}]}
    msgs = get("messages") or get("turns")
    if msgs and isinstance(msgs[0], str):  # `turns`: user messages only; the first one is used
        msgs = [{"role": "user", "content": msgs[0]}]
    if not msgs:
        msgs = [{"role": "user", "content": str(get("prompt") or get("text") or "")}]
    msgs = [dict(m) for m in msgs]
    while msgs and msgs[-1].get("role") == "assistant":
        msgs.pop()
    return {"category": str(get("category", "default")), "messages": msgs, "id": get("id")}


def train_prompts(seed: int) -> tuple[list[dict[str, Any]], str]:
    """Training prompts: the suite's `train` split when available, else local ones."""
    suite = suite_split("train")
    if suite:
        return suite, f"{SUITE}:train"
    return _local_prompts(seed), "local (stdlib sources/docstrings + topic requests)"


def eval_prompts() -> tuple[list[dict[str, Any]], str]:
    """Eval prompts of the suite; falls back to a held-out slice of local prompts."""
    suite = suite_split("eval")
    if suite:
        return suite, f"{SUITE}:eval"
    return _local_prompts(12345)[:96], "local held-out (suite not available)"


def _shingles(text: str, n: int = 48) -> set[int]:
    t = " ".join(text.split())
    return {hash(t[i:i + n]) for i in range(0, max(1, len(t) - n + 1), 8)}


class EvalOverlap:
    """Detects training prompts that share content with eval prompts (48-char shingles)."""

    def __init__(self) -> None:
        ev = suite_split("eval") or []
        seen: dict[int, int] = {}
        for r in ev:
            t = " ".join(" ".join(m["content"] for m in r["messages"]).split())
            for k in {hash(t[i:i + 48]) for i in range(0, max(1, len(t) - 47))}:
                seen[k] = seen.get(k, 0) + 1
        # text shared by several eval prompts is a request template, not content: ignore it
        self.keys: set[int] = {k for k, n in seen.items() if n < 3}

    def __call__(self, text: str) -> bool:
        # > 5 hits at stride 8: about 90 characters of shared content, not a template boundary
        return bool(self.keys) and len(_shingles(text) & self.keys) > 5


# ---------------------------------------------------------------- corpus


def chat_ids(tok: Any, messages: list[dict[str, str]], max_len: int) -> list[int]:
    """Chat-templated prompt ids (generation prompt added), keeping the last `max_len` tokens."""
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ids = list(ids)
    return ids[-max_len:]


@torch.no_grad()
def generate_records(target: Any, tok: Any, prompts: list[list[int]], sample: bool,
                     max_new: int, temperature: float, topk: int, seed: int) -> list[dict[str, Any]]:
    """Decode a batch of prompt ids with the target (left padding); keep top-K raw logits."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        att[i, width - len(p):] = 1
    torch.manual_seed(seed)
    kw: dict[str, Any] = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if sample \
        else dict(do_sample=False)
    out = target.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new,
                          output_logits=True, return_dict_in_generate=True, pad_token_id=pad, **kw)
    gen = out.sequences[:, width:]
    logits = torch.stack(out.logits, dim=1)  # [B, T, V] raw
    vals, idx = logits.float().topk(topk, dim=-1)
    eos = set(tok.eos_token_id if isinstance(tok.eos_token_id, list) else [tok.eos_token_id])
    eos |= {tok.convert_tokens_to_ids("<|im_end|>")}
    recs = []
    for i, p in enumerate(prompts):
        g = gen[i].tolist()
        n = len(g)
        for j, t in enumerate(g):
            if t in eos:
                n = j + 1
                break
        recs.append({"prompt": p, "gen": g[:n], "idx": idx[i, :n].to(torch.int32).numpy(),
                     "val": vals[i, :n].to(torch.float16).numpy(), "sample": sample})
    return recs


def save_shard(path: Path, recs: list[dict[str, Any]]) -> None:
    """Write records as one `.npz` shard (no pickle)."""
    po = np.cumsum([0] + [len(r["prompt"]) for r in recs])
    go = np.cumsum([0] + [len(r["gen"]) for r in recs])
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, prompt=np.concatenate([np.asarray(r["prompt"], np.int32) for r in recs]),
             gen=np.concatenate([np.asarray(r["gen"], np.int32) for r in recs]),
             po=po, go=go, idx=np.concatenate([r["idx"] for r in recs]),
             val=np.concatenate([r["val"] for r in recs]),
             sample=np.asarray([r["sample"] for r in recs], bool))
    tmp.rename(path)


def load_shard(path: Path) -> list[dict[str, Any]]:
    z = np.load(path, allow_pickle=False)
    po, go = z["po"], z["go"]
    return [{"prompt": z["prompt"][po[i]:po[i + 1]], "gen": z["gen"][go[i]:go[i + 1]],
             "idx": z["idx"][go[i]:go[i + 1]], "val": z["val"][go[i]:go[i + 1]],
             "sample": bool(z["sample"][i])} for i in range(len(po) - 1)]


# ---------------------------------------------------------------- trainable drafter


class LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank delta `scale * B @ A` (fp32)."""

    def __init__(self, base: nn.Linear, rank: int, scale: float) -> None:
        super().__init__()
        self.base = base
        base.weight.requires_grad_(False)
        self.scale = scale
        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + nn.functional.linear(nn.functional.linear(x, self.lora_A), self.lora_B) * self.scale


def make_trainable(drafter: Any, rank: int, scale: float, vocab: int) -> nn.ParameterDict:
    """Wrap the drafter's projections in LoRA, make norms fp32 trainable; returns the head bias."""
    for p in drafter.parameters():
        p.requires_grad_(False)
    for layer in drafter.model.layers:
        for name in dr.PROJECTIONS:
            mod = layer.self_attn if name in ("q_proj", "k_proj", "v_proj", "o_proj") else layer.mlp
            setattr(mod, name, LoRALinear(getattr(mod, name), rank, scale))
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.weight = nn.Parameter(norm.weight.detach().float(), requires_grad=True)
    drafter.model.norm.weight = nn.Parameter(drafter.model.norm.weight.detach().float(), requires_grad=True)
    return nn.ParameterDict({"bias": nn.Parameter(torch.zeros(vocab))})


def adapter_state(drafter: Any, head: nn.ParameterDict, token_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The exportable tensors (bf16 deltas and norms, sub-vocab ids and bias)."""
    w: dict[str, torch.Tensor] = {}
    for j, layer in enumerate(drafter.model.layers):
        for name in dr.PROJECTIONS:
            mod = layer.self_attn if name in ("q_proj", "k_proj", "v_proj", "o_proj") else layer.mlp
            lin = getattr(mod, name)
            w[f"layers.{j}.{name}.lora_A"] = lin.lora_A.detach().to(torch.bfloat16).contiguous()
            w[f"layers.{j}.{name}.lora_B"] = lin.lora_B.detach().to(torch.bfloat16).contiguous()
        for norm in ("input_layernorm", "post_attention_layernorm"):
            w[f"layers.{j}.{norm}.weight"] = getattr(layer, norm).weight.detach().to(torch.bfloat16).contiguous()
    w["norm.weight"] = drafter.model.norm.weight.detach().to(torch.bfloat16).contiguous()
    w["head.token_ids"] = token_ids.to(torch.int64).contiguous()
    w["head.bias"] = head["bias"].detach()[token_ids].to(torch.bfloat16).contiguous()
    return w


def rank_vocab(counts: np.ndarray, n: int) -> torch.Tensor:
    """The `n` most frequent token ids (ties: lower id first, i.e. earlier BPE merge)."""
    order = np.lexsort((np.arange(len(counts)), -counts))
    return torch.from_numpy(np.sort(order[:n]).astype(np.int64))


# ---------------------------------------------------------------- training


def _batches(recs: list[dict[str, Any]], cfg: DistillConfig, rng: random.Random) -> list[list[int]]:
    """Groups of record indices of similar length, about `batch_tokens` tokens each."""
    lens = [min(len(r["prompt"]), cfg.max_context) + len(r["gen"]) for r in recs]
    order = sorted(range(len(recs)), key=lambda i: (lens[i], rng.random()))
    groups, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * lens[i] > cfg.batch_tokens:
            groups.append(cur)
            cur = []
        cur.append(i)
    if cur:
        groups.append(cur)
    rng.shuffle(groups)
    return groups


def train_step(drafter: Any, head: nn.ParameterDict, emb_sub: torch.Tensor, full2sub: torch.Tensor,
               recs: list[dict[str, Any]], cfg: DistillConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss on one batch (right padding; loss on generated positions only)."""
    seqs, starts = [], []
    for r in recs:
        p = list(r["prompt"][-cfg.max_context:])
        seqs.append(p + list(r["gen"]))
        starts.append(len(p))
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        att[i, :len(s)] = 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = drafter.model(input_ids=ids, attention_mask=att, use_cache=False).last_hidden_state
    rows, t_idx, t_val = [], [], []
    for i, r in enumerate(recs):
        n = len(r["gen"])
        pos = torch.arange(starts[i] - 1, starts[i] - 1 + n)
        rows.append(h[i, pos])
        t_idx.append(torch.from_numpy(r["idx"].astype(np.int64)))
        t_val.append(torch.from_numpy(r["val"].astype(np.float32)))
    hs = torch.cat(rows)
    ti, tv = torch.cat(t_idx), torch.cat(t_val)
    bias_sub = head["bias"][full2sub_ids(full2sub)]
    logits = (hs.float() @ emb_sub.float().T) + bias_sub
    logq = logits.log_softmax(-1)
    sub = full2sub[ti]  # [N, K]
    ok = sub >= 0
    tp = tv.masked_fill(~ok, -1e4).softmax(-1) * ok
    tp = tp / tp.sum(-1, keepdim=True).clamp_min(1e-9)
    lq = logq.gather(-1, sub.clamp_min(0))
    kl = -(tp * lq).sum(-1)
    top_ok = ok[:, 0]
    ce = -lq[:, 0]
    loss = kl.mean() + cfg.ce_weight * (ce * top_ok).sum() / top_ok.sum().clamp_min(1)
    with torch.no_grad():
        agree = ((logits.argmax(-1) == sub[:, 0]) & top_ok).float().mean().item()
    return loss, {"loss": loss.item(), "agree": agree, "tokens": float(len(hs))}


def full2sub_ids(full2sub: torch.Tensor) -> torch.Tensor:
    """The sub-vocabulary's token ids (inverse of the full->sub lookup table)."""
    return (full2sub >= 0).nonzero().squeeze(-1)


# ---------------------------------------------------------------- one run


@dataclass
class Corpus:
    """The generated records kept for training, their token counts, and the prompts drawn from."""

    prompts: list[dict[str, Any]]
    source: str
    overlap: Callable[[str], bool]  # True for text sharing content with an eval prompt (`EvalOverlap`)
    counts: np.ndarray  # per token id: generated tokens plus target top-1 tokens of the records
    recs: list[dict[str, Any]] = field(default_factory=list)
    n_dropped: int = 0


@dataclass
class DistillRun:
    """What the steps of one distillation run share: models, optimiser, counters and corpus."""

    cfg: DistillConfig
    out: Path
    shard_dir: Path
    ckpt_path: Path
    tok: Any
    target: Any
    drafter: Any
    head: nn.ParameterDict
    params: list[nn.Parameter]
    opt: torch.optim.Optimizer
    state: dict[str, Any]  # the checkpointed counters (JSON), also written to the training record
    corpus: Corpus
    local: list[dict[str, Any]]


def work_paths(cfg: DistillConfig) -> tuple[Path, Path]:
    """The corpus shard folder (created) and the checkpoint file of this layer set and rank."""
    work = Path(cfg.work) if cfg.work else cache_dir() / "distill"
    shard_dir = work / "corpus"
    shard_dir.mkdir(parents=True, exist_ok=True)
    return shard_dir, work / f"ckpt-{'-'.join(map(str, cfg.layers))}-r{cfg.rank}.pt"


def load_target() -> tuple[Any, Any]:
    """The offline target's tokenizer and frozen bf16 model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tpath = ensure_target()
    tok = AutoTokenizer.from_pretrained(tpath)
    target = AutoModelForCausalLM.from_pretrained(tpath, dtype=torch.bfloat16).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    return tok, target


def trainable_drafter(target: Any, cfg: DistillConfig) -> tuple[Any, nn.ParameterDict, list[nn.Parameter],
                                                                 torch.optim.Optimizer]:
    """The drafter skeleton made trainable, its head bias, the trained parameters and AdamW."""
    drafter = dr.build_drafter_skeleton(target, cfg.layers)
    head = make_trainable(drafter, cfg.rank, cfg.scale, target.config.vocab_size)
    params = [p for p in drafter.parameters() if p.requires_grad] + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    return drafter, head, params, opt


def new_state() -> dict[str, Any]:
    """The counters of a run that starts from nothing."""
    return {"step": 0, "elapsed": 0.0, "greedy_cursor": 0, "gen_time": 0.0, "train_time": 0.0, "tokens_seen": 0,
            "gen_batches": 0, "history": []}


def resume_from(ckpt_path: Path, drafter: Any, head: nn.ParameterDict, opt: torch.optim.Optimizer,
                state: dict[str, Any]) -> None:
    """Load a checkpoint's trained tensors, optimiser and counters into the run."""
    ck = torch.load(ckpt_path, weights_only=True)
    trainable = {n: p for n, p in drafter.named_parameters() if p.requires_grad}
    for n, t in ck["params"].items():
        (head["bias"] if n == "head.bias" else trainable[n]).data.copy_(t)
    opt.load_state_dict(ck["opt"])
    state.update(json.loads(ck["state"]))
    print(f"[distill] resumed from {ckpt_path} at step {state['step']}", flush=True)


def add_segment(state: dict[str, Any], cfg: DistillConfig) -> None:
    """Record this (re)start and the knobs it runs with: a resumed run may change them."""
    state.setdefault("segments", []).append(
        {"from_step": state["step"], "from_elapsed_s": round(state["elapsed"]), "minutes": cfg.minutes,
         "threads": cfg.threads, "gen_frac": cfg.gen_frac, "max_context": cfg.max_context, "lr": cfg.lr,
         "ce_weight": cfg.ce_weight})


def add_records(corpus: Corpus, tok: Any, rs: list[dict[str, Any]]) -> None:
    """Keep the records whose prompt shares no eval text; count their generated and top-1 tokens."""
    for r in rs:
        if corpus.overlap(tok.decode(r["prompt"])):
            corpus.n_dropped += 1
            continue
        corpus.recs.append(r)
        np.add.at(corpus.counts, r["gen"], 1.0)
        np.add.at(corpus.counts, r["idx"][:, 0], 1.0)


def load_cached_corpus(run: DistillRun) -> None:
    """Add the run's cached shards to the corpus; a corpus made past the checkpoint is continued."""
    cfg, state, corpus = run.cfg, run.state, run.corpus
    shards = sorted(run.shard_dir.glob(f"shard-{cfg.seed:03d}-*.npz"))
    for s in shards:
        add_records(corpus, run.tok, load_shard(s))
    if len(shards) > state["gen_batches"]:  # corpus made before the last checkpoint: continue it
        nums = [int(s.stem.split("-")[-1]) for s in shards]
        state["gen_batches"] = max(nums) + 1
        state["greedy_cursor"] = min(len(corpus.prompts), cfg.gen_batch * sum(1 for n in nums if n % 2 == 0))
    print(f"[distill] corpus: {len(corpus.recs)} records from cache, prompts: {corpus.source} "
          f"({len(corpus.prompts)})", flush=True)


def switch_to_suite(corpus: Corpus) -> None:
    """Draw from the prompt suite's `train` split from now on if it has landed meanwhile."""
    if corpus.source.startswith(SUITE):
        return
    suite = suite_split("train")
    if suite:
        corpus.prompts, corpus.source, corpus.overlap = suite, f"{SUITE}:train", EvalOverlap()
        print(f"[distill] switched to {SUITE}:train ({len(suite)} prompts)", flush=True)


def greedy_batch(tok: Any, prompts: list[dict[str, Any]], cfg: DistillConfig, cursor: int) -> list[list[int]]:
    """The next `gen_batch` prompts of a fixed seeded order (every prompt once), shortest first."""
    perm = list(range(len(prompts)))
    random.Random(cfg.seed).shuffle(perm)
    cand = [chat_ids(tok, prompts[i]["messages"], 512) for i in perm[cursor:cursor + cfg.gen_batch]]
    return sorted(cand, key=len)


def sampled_batch(tok: Any, prompts: list[dict[str, Any]], local: list[dict[str, Any]], cfg: DistillConfig,
                  b: int, from_suite: bool) -> list[list[int]]:
    """Batch `b`'s seeded draw of prompts (some local ones beside the suite's), similar lengths."""
    prng = random.Random(cfg.seed * 100003 + b)
    n_local = int(cfg.gen_batch * 4 * cfg.local_frac) if from_suite else 0
    pool = [prompts[i] for i in prng.sample(range(len(prompts)), min(len(prompts), cfg.gen_batch * 4 - n_local))]
    pool += prng.sample(local, min(len(local), n_local))
    cand = sorted((chat_ids(tok, p["messages"], 512) for p in pool), key=len)
    start = prng.randrange(0, max(1, len(cand) - cfg.gen_batch + 1))
    return cand[start:start + cfg.gen_batch]


def generate_batch(run: DistillRun) -> None:
    """Decode the next batch with the target (greedy or sampled), store it as a shard, keep it."""
    cfg, state, corpus = run.cfg, run.state, run.corpus
    b = state["gen_batches"]
    if b % 5 == 0:
        switch_to_suite(corpus)
    cursor = state.get("greedy_cursor", 0)
    greedy = b % 2 == 0 and cursor < len(corpus.prompts)
    if greedy:  # every train prompt once, greedy, in a fixed seeded order
        chosen = greedy_batch(run.tok, corpus.prompts, cfg, cursor)
        state["greedy_cursor"] = cursor + cfg.gen_batch
    else:  # sampled: train prompts (and some local ones), similar lengths batched together
        chosen = sampled_batch(run.tok, corpus.prompts, run.local, cfg, b, corpus.source.startswith(SUITE))
    rs = generate_records(run.target, run.tok, chosen, sample=not greedy, max_new=cfg.max_new_tokens,
                          temperature=cfg.temperature, topk=cfg.topk, seed=cfg.seed + b)
    save_shard(run.shard_dir / f"shard-{cfg.seed:03d}-{b:05d}.npz", rs)
    add_records(corpus, run.tok, rs)
    state["gen_batches"] = b + 1


def artifact_config(cfg: DistillConfig, target: Any) -> dict[str, Any]:
    """The artifact's config.json: layers, LoRA rank/scale, sub-vocabulary and target identity."""
    return {"format": dr.FORMAT, "layers": cfg.layers, "lora_rank": cfg.rank,
            "lora_scale": cfg.scale, "sub_vocab": cfg.sub_vocab,
            "target": {"name": "SmolLM2-135M-Instruct", "hidden_size": target.config.hidden_size,
                       "vocab_size": target.config.vocab_size, "num_hidden_layers": target.config.num_hidden_layers,
                       "fingerprint": dr.target_fingerprint(target)}}


def training_record(cfg: DistillConfig, corpus: Corpus, state: dict[str, Any],
                    token_ids: torch.Tensor) -> dict[str, Any]:
    """The artifact's training_record.json: knobs, corpus, counters and the last 200 history points."""
    counts = corpus.counts
    return {"config": asdict(cfg), "prompt_source": corpus.source, "n_prompts": len(corpus.prompts),
            "corpus_records": len(corpus.recs), "corpus_gen_tokens": int(sum(len(r["gen"]) for r in corpus.recs)),
            "records_dropped_eval_overlap": corpus.n_dropped,
            "sub_vocab_coverage_of_target_top1": float(counts[token_ids.numpy()].sum() / max(1, counts.sum())),
            **{k: v for k, v in state.items() if k != "history"}, "history": state["history"][-200:]}


def export(run: DistillRun) -> None:
    """Write the artifact to `out`: adapters over the corpus' top sub-vocabulary, config, record."""
    from safetensors.torch import save_file

    out = run.out
    token_ids = rank_vocab(run.corpus.counts, run.cfg.sub_vocab)
    w = adapter_state(run.drafter, run.head, token_ids)
    out.mkdir(parents=True, exist_ok=True)
    save_file(w, str(out / (dr.WEIGHTS_NAME + ".tmp")))
    (out / (dr.WEIGHTS_NAME + ".tmp")).rename(out / dr.WEIGHTS_NAME)
    (out / dr.CONFIG_NAME).write_text(json.dumps(artifact_config(run.cfg, run.target), indent=2) + "\n")
    rec = training_record(run.cfg, run.corpus, run.state, token_ids)
    (out / "training_record.json").write_text(json.dumps(rec, indent=1) + "\n")


def checkpoint(run: DistillRun) -> None:
    """Save the trained tensors, optimiser and counters (atomically), then export the artifact."""
    trainable = {n: p.detach().clone() for n, p in run.drafter.named_parameters() if p.requires_grad}
    trainable["head.bias"] = run.head["bias"].detach().clone()
    tmp = run.ckpt_path.with_suffix(".tmp")
    torch.save({"params": trainable, "opt": run.opt.state_dict(), "state": json.dumps(run.state)}, tmp)
    tmp.rename(run.ckpt_path)
    export(run)


def bootstrap(run: DistillRun) -> None:
    """Generate until the corpus holds 6,000 generated tokens, before any training step."""
    state = run.state
    while sum(len(r["gen"]) for r in run.corpus.recs) < 6000:
        t0 = time.time()
        generate_batch(run)
        state["gen_time"] += time.time() - t0
        state["elapsed"] += time.time() - t0


def sub_vocab_lookup(counts: np.ndarray, n: int, emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The full->sub lookup table (-1: not in it) of the `n` most frequent tokens, and their embeddings."""
    token_ids = rank_vocab(counts, n)
    full2sub = torch.full((len(counts),), -1, dtype=torch.long)
    full2sub[token_ids] = torch.arange(len(token_ids))
    return full2sub, emb[token_ids]


def learning_rate(cfg: DistillConfig, step: int, elapsed: float, budget: float) -> float:
    """Linear warm-up over 50 steps times a cosine from `lr` to 10% of it over the time budget."""
    frac = min(1.0, elapsed / budget)
    return cfg.lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def optimise(run: DistillRun, recs: list[dict[str, Any]], emb_sub: torch.Tensor, full2sub: torch.Tensor,
             lr: float) -> dict[str, float]:
    """One AdamW step at `lr` on one batch (gradients clipped to norm 1); the step's figures."""
    for pg in run.opt.param_groups:
        pg["lr"] = lr
    loss, info = train_step(run.drafter, run.head, emb_sub, full2sub, recs, run.cfg)
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.params, 1.0)
    run.opt.step()
    return info


def empty_window() -> dict[str, float]:
    """Running sums of the training figures since the last checkpoint."""
    return {"loss": 0.0, "agree": 0.0, "n": 0}


def log_window(state: dict[str, Any], window: dict[str, float], corpus_size: int) -> None:
    """Append the window's mean loss and agreement to the history (and print it), if it has steps."""
    if window["n"]:
        state["history"].append({"step": state["step"], "elapsed_s": round(state["elapsed"]),
                                 "loss": window["loss"] / window["n"],
                                 "train_agree": window["agree"] / window["n"],
                                 "tokens_seen": state["tokens_seen"], "corpus": corpus_size})
        print(f"\n[distill] {json.dumps(state['history'][-1])}", flush=True)


def show_progress(bar: Any, state: dict[str, Any], window: dict[str, float], corpus_size: int) -> None:
    """Move the time bar to the elapsed seconds; show the window's means."""
    bar.update(int(state["elapsed"]) - bar.n)
    if window["n"]:
        bar.set_postfix(step=state["step"], loss=f"{window['loss'] / window['n']:.3f}",
                        agree=f"{window['agree'] / window['n']:.3f}", corpus=corpus_size)


def train_loop(run: DistillRun, rng: random.Random) -> None:
    """Generate or train (keeping generation at `gen_frac` of the time) until the budget is spent;
    checkpoint every `checkpoint_minutes`."""
    from tqdm.auto import tqdm

    cfg, state, recs = run.cfg, run.state, run.corpus.recs
    budget = cfg.minutes * 60
    bar = tqdm(total=int(budget), initial=int(min(state["elapsed"], budget)), unit="s",
               desc="distill", mininterval=10)
    last_ck = time.time()
    emb = run.target.model.embed_tokens.weight.detach()
    full2sub, emb_sub = sub_vocab_lookup(run.corpus.counts, cfg.train_sub_vocab, emb)
    groups: list[list[int]] = []
    window = empty_window()
    while state["elapsed"] < budget and (cfg.steps <= 0 or state["step"] < cfg.steps):
        t0 = time.time()
        if state["gen_time"] < cfg.gen_frac * state["elapsed"]:
            generate_batch(run)
            groups = []
            state["gen_time"] += time.time() - t0
        else:
            if not groups:  # a new pass over the corpus, on its current sub-vocabulary
                groups = _batches(recs, cfg, rng)
                full2sub, emb_sub = sub_vocab_lookup(run.corpus.counts, cfg.train_sub_vocab, emb)
            g = groups.pop()
            lr = learning_rate(cfg, state["step"], state["elapsed"], budget)
            info = optimise(run, [recs[i] for i in g], emb_sub, full2sub, lr)
            state["step"] += 1
            state["tokens_seen"] += int(info["tokens"])
            state["train_time"] += time.time() - t0
            window["loss"] += info["loss"]
            window["agree"] += info["agree"]
            window["n"] += 1
        state["elapsed"] += time.time() - t0
        show_progress(bar, state, window, len(recs))
        if time.time() - last_ck > cfg.checkpoint_minutes * 60:
            log_window(state, window, len(recs))
            window = empty_window()
            checkpoint(run)
            last_ck = time.time()
    bar.close()


def run_distill(cfg: DistillConfig, resume: bool = True) -> Path:
    """Run (or resume) the interleaved corpus generation + training; returns the artifact folder."""
    torch.set_num_threads(cfg.threads)
    shard_dir, ckpt_path = work_paths(cfg)
    tok, target = load_target()
    drafter, head, params, opt = trainable_drafter(target, cfg)
    state = new_state()
    if resume and ckpt_path.exists():
        resume_from(ckpt_path, drafter, head, opt, state)
    add_segment(state, cfg)
    seed = cfg.seed + state["step"] * 7919 + state["gen_batches"]
    rng = random.Random(seed)
    torch.manual_seed(seed)
    prompts, source = train_prompts(cfg.seed)
    local = _local_prompts(cfg.seed)
    corpus = Corpus(prompts, source, EvalOverlap(), np.zeros(target.config.vocab_size, np.float64))
    run = DistillRun(cfg, Path(cfg.out), shard_dir, ckpt_path, tok, target, drafter, head, params, opt, state,
                     corpus, local)
    load_cached_corpus(run)
    bootstrap(run)  # a little data before training
    train_loop(run, rng)
    checkpoint(run)
    if not (run.out / dr.WEIGHTS_NAME).exists():
        raise TreeGraftError(f"distillation wrote nothing to {run.out}")
    return run.out
