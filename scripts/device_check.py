"""One step of the device check (`scripts/device_check.sh` runs them all, each in its own process).

    PYTHONPATH=. python3 scripts/device_check.py STEP --device cuda --out DIR

Steps: versions, load, tree, cache, greedy, sampling, pocket, hf, costs, profile, speed. A step prints
what it measured, appends one JSON line to DIR/results.jsonl, ends with a `RESULT` line and exits 1
when a check fails (the traceback goes to stderr). It needs torch and transformers only (no plotly,
no ipywidgets): a bare GPU machine's python3 runs it with the project on PYTHONPATH.

The decoding steps decide on the profile named by $CLOCK, else on CUDA on this device's measured
profile (measured once per pair, cached under the work folder), else (the CPU run, kept quick) on
a100-paper; they print the wall clock beside the modelled one. `speed` times plain decoding, HF
prompt lookup and TreeGraft per round on random models shaped like Qwen3-8B (bf16) and 0.6B, and
writes the run's headline numbers (overhead share of a round, verify ms at 64 nodes vs 1 token).

The models are tiny random pairs saved to folders under $TREEGRAFT_CHECK_WORK: on CUDA in bf16
with realistic attention shapes (32 query / 4 KV heads, head dim 128); on the CPU in float32 with
4 / 2 heads of 16 (the same code, seconds instead of minutes). Under float32 tree decoding must
equal HF greedy decoding exactly; under bf16 a mismatch counts as numerics only when the two
tokens' logits are within a few bf16 steps at the first divergence (`check_lossless`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402

ARCHS = ("llama", "qwen3")
TEXT = ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
        "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.\n")
LONG = 1100  # a prompt over 1,024 tokens: the prefill's chunking and long masks


def work_dir() -> Path:
    return Path(os.environ.get("TREEGRAFT_CHECK_WORK", "/tmp/treegraft-device-check"))


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


def shapes(device: torch.device) -> dict:
    """Tiny-pair shapes: realistic heads on CUDA, small ones on the CPU."""
    if device.type == "cuda":
        return dict(heads=32, kv_heads=4, head_dim=128, dtype=torch.bfloat16)
    return dict(heads=4, kv_heads=2, head_dim=16, dtype=torch.float32)


def clock(device: torch.device, pair, given: str | None = None):
    """The profile the decoding steps decide on: `given` (default $CLOCK) when set; on CUDA this
    device's measured profile for `pair` (measured once, cached); on the CPU, where measuring would
    slow the quick run, a100-paper."""
    from treegraft_lab import measure

    if given is None:
        given = os.environ.get("CLOCK", "")
    if given:
        return measure.resolve(given, pair)
    if device.type == "cuda":
        return measure.for_pair(pair, progress=False)
    return measure.resolve("a100-paper", pair)


def clocks(gens) -> dict:
    """Wall and modelled ms of generations, side by side (prefill included in wall, not modelled)."""
    gens = list(gens)
    return {"wall_ms": round(sum(1000 * g.stats["wall_s"] for g in gens), 1),
            "modelled_ms": round(sum(g.stats["modelled_ms"] for g in gens), 1), "modelled_on": gens[0].stats["modelled_on"]}


def pair_folder(arch: str, device: torch.device) -> Path:
    """The tiny pair of `arch` for `device`, saved once under the work folder."""
    from treegraft_lab.tiny import save_tiny_pair

    s = shapes(device)
    folder = work_dir() / f"{arch}-{device.type}-{s['heads']}x{s['head_dim']}"
    if not (folder / "mid" / "config.json").exists():
        save_tiny_pair(folder, arch, **s)
    return folder


def load(arch: str, device: torch.device, **kw):
    from treegraft_lab.models import load_pair

    folder = pair_folder(arch, device)
    return load_pair(target=folder / "target", mid=folder / "mid", device=device, dtype=shapes(device)["dtype"], **kw)


def prompt_ids(pair, n: int | None = None) -> list[int]:
    text = TEXT * (1 + (n or 0) // len(TEXT))
    ids = pair.tokenizer(text)["input_ids"]
    return ids[:n] if n else ids


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------- steps


def step_versions(dev: torch.device) -> dict:
    import transformers

    out = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "cuda_available": torch.cuda.is_available(), "cpu": platform.processor() or platform.machine()}
    try:
        import accelerate

        out["accelerate"] = accelerate.__version__
    except ImportError:
        out["accelerate"] = None
    if torch.cuda.is_available():
        out.update(gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
                   cuda=torch.version.cuda, bf16=torch.cuda.is_bf16_supported())
    out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    out["sdpa_enabled"] = {name: getattr(torch.backends.cuda, f"{name}_sdp_enabled")()
                           for name in ("flash", "mem_efficient", "cudnn", "math")
                           if hasattr(torch.backends.cuda, f"{name}_sdp_enabled")}
    out["sdpa_backend"] = sdpa_backends(dev)
    for mod in ("plotly", "ipywidgets"):
        try:
            __import__(mod)
            out[mod] = "present"
        except ImportError:
            out[mod] = "absent"
    check(dev.type != "cuda" or torch.cuda.is_available(), "DEVICE=cuda but torch sees no GPU")
    print(json.dumps(out, indent=1))
    return out


def sdpa_backends(dev: torch.device, n: int = 24, ctx: int = 300) -> dict:
    """Which SDPA kernel serves each attention call of the decoder on `dev` (torch's own choice,
    `torch._fused_sdp_choice`), with the tiny pair's head shapes: a tree forward (4D mask, grouped
    heads folded as `kv.folded_sdpa` does) and a first prefill chunk (causal, no mask); and the
    strides the tree call's output comes back with (the memory-efficient kernel's: transposed)."""
    from torch.nn.attention import SDPBackend

    s = shapes(dev)
    rep, d, g = s["heads"] // s["kv_heads"], s["head_dim"], torch.Generator(device=dev).manual_seed(0)
    kw = dict(device=dev, dtype=s["dtype"], generator=g)
    k, v = (torch.randn(1, s["kv_heads"], ctx + n, d, **kw) for _ in range(2))
    calls = {"tree": (torch.randn(1, s["kv_heads"], rep * n, d, **kw), k, v,
                      torch.zeros(1, 1, rep * n, ctx + n, device=dev, dtype=s["dtype"]), False),
             "prefill": (torch.randn(1, s["heads"], n, d, **kw), k.repeat_interleave(rep, 1)[..., :n, :],
                         v.repeat_interleave(rep, 1)[..., :n, :], None, True)}
    out = {}
    for name, (q, kk, vv, mask, causal) in calls.items():
        choice = SDPBackend(torch._fused_sdp_choice(q, kk, vv, mask, 0.0, causal)).name
        res = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, is_causal=causal)
        out[name] = {"kernel": choice, "output_contiguous": res.is_contiguous(), "output_stride": list(res.stride())}
    return out


def step_load(dev: torch.device) -> dict:
    from treegraft_lab import kv

    out = {}
    for arch in ARCHS:
        pair = load(arch, dev)
        where = {str(d) for p in [*pair.target.parameters(), *pair.mid.parameters()] for d in [p.device]}
        dmap = getattr(pair.target, "hf_device_map", {}) or {}
        off = [k for k, v in dmap.items() if str(v) in ("cpu", "disk")]
        attn = pair.target.config._attn_implementation
        out[arch] = {"devices": sorted(where), "device_map": sorted({str(v) for v in dmap.values()}),
                     "attention": attn, "dtype": str(pair.dtype), "placement": pair.placement,
                     "forward_path": pair.forward_path, "heads": pair.target.config.num_attention_heads,
                     "kv_heads": pair.target.config.num_key_value_heads}
        print(arch, json.dumps(out[arch]))
        check(not off, f"{arch}: modules on the CPU/disk: {off[:3]}")
        check(all(d.startswith(dev.type) for d in where), f"{arch}: weights on {where}, asked for {dev}")
        if dev.type == "cuda":
            check(attn == kv.FOLDED, f"{arch}: attention {attn}, expected {kv.FOLDED}")
            check(pair.dtype == torch.bfloat16, f"{arch}: dtype {pair.dtype}")
    return out


def _tree(n: int, seed: int, vocab: int) -> tuple[list[int], list[int]]:
    """A random tree of n nodes after the root: (tokens, parent index or -1 for the root's children)."""
    import random

    rnd = random.Random(seed)
    parent = [-1] + [rnd.randrange(-1, i) for i in range(1, n)]
    return [rnd.randrange(1, vocab) for _ in range(n)], parent


def step_tree(dev: torch.device) -> dict:
    """Tree forward (one masked forward over a random tree) vs one causal forward per root-to-node path."""
    from treegraft_lab import kv

    out = {}
    for arch in ARCHS:
        pair = load(arch, dev)
        model = pair.target
        vocab = len(pair.tokenizer)
        for plen in (40, LONG):
            ids = prompt_ids(pair, plen)
            tokens, parent = _tree(24 if dev.type == "cuda" else 12, plen, vocab)  # one per-path forward each
            cache = kv.new_cache(model)
            kv.prefill(model, cache, ids)
            c, n = len(ids), len(tokens)
            allowed = torch.zeros(n, c + n, dtype=torch.bool)
            allowed[:, :c] = True
            depth, paths = [], []
            for i, p in enumerate(parent):
                path = ([] if p < 0 else paths[p]) + [i]
                paths.append(path)
                depth.append(len(path) - 1)
                allowed[i, [c + j for j in path]] = True
            tree = kv.masked_forward(model, cache, tokens, torch.tensor([c + d for d in depth]), allowed).float()
            agree, diff, firm, firm_agree = 0, 0.0, 0, 0
            with torch.inference_mode():
                for i, path in enumerate(paths):
                    x = torch.tensor([ids + [tokens[j] for j in path]], device=pair.device)
                    ref = model(input_ids=x, logits_to_keep=1).logits[0, -1].float()
                    diff = max(diff, float((ref - tree[i]).abs().max()))
                    same = int(ref.argmax()) == int(tree[i].argmax())
                    agree += same
                    top2 = ref.topk(2).values
                    if float(top2[0] - top2[1]) > 0.25:  # a clear winner (two bf16 steps at |logit| 16-32)
                        firm += 1
                        firm_agree += same
            key = f"{arch}-prompt{plen}"
            out[key] = {"rows": n, "top1_agreement": agree / n, "clear_winner_agreement": firm_agree / max(firm, 1),
                        "clear_rows": firm, "max_abs_diff": diff}
            print(key, json.dumps(out[key]))
            if pair.dtype == torch.float32:
                check(agree == n and diff < 1e-3, f"{key}: float32 tree forward differs from per-path forwards")
            else:
                check(firm_agree == firm, f"{key}: a clear top-1 differs between tree and per-path forwards")
    return out


def step_cache(dev: torch.device) -> dict:
    """After a few committed rounds the target's and the mid's caches equal a fresh prefill."""
    from treegraft_lab import kv
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    out = {}
    for arch in ARCHS:
        pair = load(arch, dev)
        ids = prompt_ids(pair, 60)
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101"), profile=clock(dev, pair))
        print(arch, "clocks", json.dumps(clocks([dec.generate(ids, max_new_tokens=20)])))
        for label, cache, model, n in (("target", dec.target.cache, pair.target, dec.target.cached),
                                       ("mid", dec.mid.cache, pair.mid, dec.mid.cached)):
            committed = dec.ids[:n]
            fresh = kv.new_cache(model)
            kv.prefill(model, fresh, committed)
            check(kv.cache_len(cache) >= n, f"{arch} {label}: cache holds {kv.cache_len(cache)} < {n} positions")
            diff = max(float((a.keys[..., :n, :].float() - b.keys[..., :n, :].float()).abs().max())
                       for a, b in zip(cache.layers, fresh.layers))
            diff = max(diff, *(float((a.values[..., :n, :].float() - b.values[..., :n, :].float()).abs().max())
                               for a, b in zip(cache.layers, fresh.layers)))
            scale = max(float(b.keys[..., :n, :].float().abs().max()) for b in fresh.layers)
            out[f"{arch}-{label}"] = {"positions": n, "max_abs_diff": diff, "max_abs": scale}
            print(f"{arch} {label}", json.dumps(out[f"{arch}-{label}"]))
            tol = 1e-4 if pair.dtype == torch.float32 else 0.05 * max(scale, 1.0)
            check(diff <= tol, f"{arch} {label}: committed cache differs from a fresh prefill by {diff}")
    return out


def _greedy(pair, ids: list[int], n: int) -> list[int]:
    with torch.inference_mode():
        x = torch.tensor([ids], device=pair.device)
        out = pair.target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False)
    return out[0, len(ids):].tolist()


def step_greedy(dev: torch.device) -> dict:
    """Greedy match rate against HF generate for small, mid, 10101 and oracle (twice in bf16: with
    the model's own logits, and with float32 logits)."""
    from treegraft_lab.commands.check_lossless import divergence
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    out, beyond = {}, []
    variants = [False] if shapes(dev)["dtype"] == torch.float32 else [False, True]
    for arch in ARCHS:
        for f32 in variants:
            pair = load(arch, dev, float32_logits=f32)
            prompts = [prompt_ids(pair, 50), prompt_ids(pair, 200)[120:]][: 2 if dev.type == "cuda" else 1]
            new = 24 if dev.type == "cuda" else 8  # the CPU run is a smoke run of the same code
            refs = [_greedy(pair, p, new) for p in prompts]
            prof = clock(dev, pair)
            for schedule in ("small", "mid", "10101", "oracle"):
                match, gaps, gens = 0, [], []
                for p, ref in zip(prompts, refs):
                    gens.append(TreeGraftDecoder(pair, DecodeConfig(schedule=schedule), profile=prof).generate(p, max_new_tokens=new))
                    ours = gens[-1].token_ids
                    if ours == ref:
                        match += 1
                        continue
                    d = divergence(pair, p, ours, ref)
                    gaps.append(d)
                    if pair.dtype == torch.float32 or not d.get("numerics"):
                        beyond.append((arch, schedule, f32, d))
                key = f"{arch}-{schedule}" + ("-f32logits" if f32 else "")
                out[key] = {"match_rate": match / len(prompts), "mismatches": gaps, **clocks(gens)}
                print(key, json.dumps(out[key]))
    check(not beyond, f"mismatches beyond rounding: {beyond}")
    return out


def step_sampling(dev: torch.device) -> dict:
    """Sampling (temperature 1, top-p 0.95) with a seed: the same seed gives the same tokens."""
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    out = {}
    for arch in ARCHS:
        pair = load(arch, dev)
        ids = prompt_ids(pair, 50)
        runs, new, prof = {}, 24 if dev.type == "cuda" else 12, clock(dev, pair)
        for seed in (0, 0, 1):
            cfg = DecodeConfig(schedule="10101", temperature=1.0, top_p=0.95, seed=seed)
            runs.setdefault(seed, []).append(TreeGraftDecoder(pair, cfg, profile=prof).generate(ids, max_new_tokens=new).token_ids)
        vocab = pair.target.config.vocab_size
        same = runs[0][0] == runs[0][1]
        out[arch] = {"seed0": runs[0][0], "seed1": runs[1][0], "same_seed_same_tokens": same}
        print(arch, json.dumps(out[arch]))
        check(same, f"{arch}: one seed gave two outputs")
        check(all(0 <= t < vocab and len(r) == new for rs in runs.values() for r in rs for t in r), f"{arch}: bad tokens")
    return out


def step_pocket(dev: torch.device) -> dict:
    """The pocket loader on a tiny target on the device with synthetic adapters: every tensor on
    the target's device, and tree decoding with it lossless."""
    from treegraft_lab import cpu_path
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.tiny import pocket_folder
    from treegraft_lab.zoo.drafter import load_drafter

    pair = load("llama", dev, cpu_path=False)  # as load_pair does: the drafter copies the stock layers
    folder = pocket_folder(pair.target, work_dir() / f"pocket-{dev.type}", sub=48)
    drafter = load_drafter(pair.target, folder)
    if cpu_path.install(pair.target):
        cpu_path.install(drafter)
    where = sorted({str(t.device) for t in [*drafter.parameters(), *drafter.buffers(), drafter.lm_head.token_ids]})
    pair.mid = drafter
    ids = prompt_ids(pair, 50)
    ref = _greedy(pair, ids, 24)
    gen = TreeGraftDecoder(pair, DecodeConfig(schedule="10101"), profile=clock(dev, pair)).generate(ids, max_new_tokens=24)
    ours = gen.token_ids
    out = {"devices": where, "matches_greedy": ours == ref, **clocks([gen])}
    print(json.dumps(out))
    check(where == sorted({str(p.device) for p in pair.target.parameters()}), f"drafter tensors on {where}")
    check(ours == ref or pair.dtype != torch.float32, "float32 pocket decoding differs from greedy")
    return out


def step_hf(dev: torch.device) -> dict:
    """HF prompt lookup and assisted generation with the tiny pair: each must run (a skip or an
    exception is a failure) and, in float32, equal plain greedy decoding."""
    out = {}
    for arch in ARCHS:
        pair = load(arch, dev, cpu_path=False)
        ids = prompt_ids(pair, 80)
        ref = _greedy(pair, ids, 24)
        x = torch.tensor([ids], device=pair.device)
        for name, kw in (("prompt_lookup", {"prompt_lookup_num_tokens": 8}), ("assisted", {"assistant_model": pair.mid})):
            with torch.inference_mode():
                got = pair.target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=24, do_sample=False,
                                           **kw)[0, len(ids):].tolist()
            out[f"{arch}-{name}"] = {"matches_greedy": got == ref}
            print(f"{arch} {name}", json.dumps(out[f"{arch}-{name}"]))
            check(got == ref or pair.dtype != torch.float32, f"{arch} {name}: float32 output differs from greedy")
    return out


def step_costs(dev: torch.device) -> dict:
    """This device's profile of the tiny Llama pair (`measure.measure`, every forward synchronised),
    and a decode that reads it (`profile=` the measured profile, value pruning)."""
    from treegraft_lab import measure
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    pair = load("llama", dev)
    prof = measure.measure(pair, progress=False, repeats=1 if dev.type == "cpu" else 3)
    ids = prompt_ids(pair, 50)
    gen = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", prune="value"), profile=prof).generate(ids, max_new_tokens=12)
    out = {"name": prof.name, "target_ms_1": prof.target_ms(1), "target_ms_64": prof.target_ms(64),
           "mid_ms_1": prof.mid_ms(1), "modelled_on": gen.stats["modelled_on"],
           "matches_greedy": gen.token_ids == _greedy(pair, ids, 12)}
    print(json.dumps(out))
    check(prof.target_ms(64) > 0 and gen.stats["modelled_ms"] > 0, "no positive modelled time")
    check(out["matches_greedy"] or pair.dtype != torch.float32, "float32 decoding differs from greedy")
    return out


PROFILE_MODELS = {  # random layers shaped like the paper's Qwen3 models
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936),
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936),
}


def forward_times(model, dev: torch.device, ctx: int, ns: tuple[int, ...], repeats: int, seed: int = 0) -> dict:
    """ms of one masked forward of n new tokens after `ctx` cached ones, per n: `first` (a shape's
    first call, cold), `fixed` (median of `repeats` calls of one shape back to back) and `mixed`
    (median over a shuffled run of every shape `repeats` times, after the warm-up: tree sizes
    change from round to round, and a kernel library may plan per shape)."""
    import random

    from treegraft_lab import kv

    vocab = model.config.vocab_size
    cache = kv.new_cache(model)
    kv.prefill(model, cache, torch.randint(0, vocab, (ctx,)).tolist())

    def once(n: int) -> float:
        allowed = torch.ones(n, ctx + n, dtype=torch.bool)
        allowed[:, ctx:] = torch.ones(n, n, dtype=torch.bool).tril()
        toks = torch.randint(0, vocab, (n,)).tolist()
        sync(dev)
        t = time.perf_counter()
        kv.masked_forward(model, cache, toks, torch.arange(ctx, ctx + n), allowed)
        sync(dev)
        kv.truncate(cache, ctx)
        return 1000 * (time.perf_counter() - t)

    first = {n: once(n) for n in ns}
    fixed = {n: statistics.median(once(n) for _ in range(repeats)) for n in ns}
    order = [n for n in ns for _ in range(repeats)]
    random.Random(seed).shuffle(order)
    runs: dict[int, list[float]] = {n: [] for n in ns}
    for n in order:
        runs[n].append(once(n))
    return {kind: {n: round(v, 3) for n, v in table.items()}
            for kind, table in (("first", first), ("fixed", fixed), ("mixed", {n: statistics.median(r) for n, r in runs.items()}))}


def random_model(shape: dict, dev: torch.device, dtype: torch.dtype, seed: int = 0):
    """A random Qwen3 model of `shape` on `dev`, attending as load_pair does there."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    from treegraft_lab import kv

    cfg = Qwen3Config(**shape, max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(seed)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa").eval()
    if dev.type == "cuda":
        kv.use_folded_attention(model)
    return model


def cpu_shape(shape: dict) -> dict:
    """A model shape scaled down for the CPU run: 2 layers at 1/8 width, a 4,096-token vocabulary."""
    return {**shape, "hidden_size": shape["hidden_size"] // 8, "intermediate_size": shape["intermediate_size"] // 8,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "vocab_size": 4096}


def step_profile(dev: torch.device, out_dir: Path) -> dict:
    """Forward time of n tree tokens (1-128) after a 256- and a 2,048-token context, for random
    models shaped like Qwen3-8B and 0.6B (on the CPU: 2 layers at 1/8 width, a short sweep): each
    shape's first call, one shape timed back to back, and all shapes shuffled after the warm-up."""
    cuda = dev.type == "cuda"
    ns = (1, 2, 4, 8, 16, 32, 64, 128) if cuda else (1, 8, 32)
    ctxs = (256, 2048) if cuda else (64, 256)
    repeats = 5 if cuda else 1
    dtype = torch.bfloat16 if cuda else torch.float32
    res: dict = {"device": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
                 "dtype": str(dtype), "unit": "ms per forward (median)", "models": {}}
    for name, shape in PROFILE_MODELS.items():
        shape = dict(shape) if cuda else cpu_shape(shape)
        model = random_model(shape, dev, dtype)
        tables: dict = {"ms": {}, "mixed_ms": {}, "first_ms": {}}
        for ctx in ctxs:
            t = forward_times(model, dev, ctx, ns, repeats, seed=ctx)
            for kind, key in (("fixed", "ms"), ("mixed", "mixed_ms"), ("first", "first_ms")):
                tables[key].update({f"ctx{ctx}-n{n}": v for n, v in t[kind].items()})
        worst = max(tables["mixed_ms"][k] / tables["ms"][k] for k in tables["ms"])
        res["models"][name] = {"shape": shape, **tables, "mixed_over_fixed_max": round(worst, 2)}
        print(name, json.dumps({k: tables[k] for k in tables}), f"mixed/fixed at most {worst:.2f}x")
        del model
        if cuda:
            torch.cuda.empty_cache()
    (out_dir / "profile.json").write_text(json.dumps(res, indent=1) + "\n")
    return res


class HostReads:
    """Counts the host's waits on `dev` while active: reads of a tensor on it (`tolist`, `item`,
    `int(t)`, ...), `torch.cuda.synchronize` and timing-event waits. On the CPU every tensor is on
    the device: reads of the host-built tree masks (tree.py) are left out there."""

    READS = ("tolist", "item", "cpu", "numpy", "__int__", "__float__", "__bool__")

    def __init__(self, dev: torch.device) -> None:
        self.dev, self.count, self.saved = dev, 0, []

    def _wrap(self, owner, name: str, tensor: bool) -> None:
        import traceback

        fn = getattr(owner, name)
        cpu = self.dev.type == "cpu"

        def counted(*args, **kwargs):
            if not tensor or (args[0].device.type == self.dev.type and not (
                    cpu and traceback.extract_stack(limit=2)[0].filename.endswith("tree.py"))):
                self.count += 1
            return fn(*args, **kwargs)

        self.saved.append((owner, name, fn))
        setattr(owner, name, counted)

    def __enter__(self) -> HostReads:
        for name in self.READS:
            self._wrap(torch.Tensor, name, True)
        self._wrap(torch.cuda, "synchronize", False)
        if self.dev.type == "cuda":
            self._wrap(torch.cuda.Event, "synchronize", False)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, fn in reversed(self.saved):
            setattr(owner, name, fn)
        self.saved = []


SPEED_TOKENS = {"cuda": 32, "cpu": 6}
LOGIT_STD = 8.0  # the spread of the speed pair's logits (random init: about 1)


def speed_pair(dev: torch.device, self_mid: bool = False):
    """Random models shaped like Qwen3-8B (target) and 0.6B (mid) in bf16 on CUDA; on the CPU
    scaled down (`cpu_shape`) in float32. `self_mid`: the target is its own mid drafter."""
    import types

    from treegraft_lab.tiny import StubTokenizer

    cuda = dev.type == "cuda"
    shape = {k: dict(v) if cuda else cpu_shape(v) for k, v in PROFILE_MODELS.items()}
    if not cuda:
        shape["qwen3-0.6b"].update(num_hidden_layers=1)
    dtype = torch.bfloat16 if cuda else torch.float32
    target = random_model(shape["qwen3-8b"], dev, dtype, seed=0)
    mid = random_model(shape["qwen3-0.6b"], dev, dtype, seed=1)
    for m in (target, mid):  # peaked next-token distributions, as a trained model's: the greedy path
        with torch.no_grad():  # leads the tree (flat random logits would leave it to pruning)
            m.lm_head.weight.mul_(LOGIT_STD / (m.config.initializer_range * m.config.hidden_size**0.5))
    return types.SimpleNamespace(name="qwen3-8b-like+0.6b-like", tokenizer=StubTokenizer(shape["qwen3-8b"]["vocab_size"]),
                                 target=target, mid=mid, device=dev, dtype=dtype, forward_path="stock")


def per_round(gens, reads: float) -> dict:
    """A method's cost per round from its generations: wall ms, draft, verify, host overhead
    (round time outside forwards), overhead share, host waits, tokens per round, modelled ms."""
    rounds = [r for g in gens for r in g.rounds]
    n, ms = len(rounds), lambda x: round(1000 * x / len(rounds), 2)
    wall, fwd = sum(r.round_s for r in rounds), sum(r.forward_s for r in rounds)
    return {"rounds": n, "ms_per_round": ms(wall), "draft_ms": ms(sum(r.draft_s for r in rounds)),
            "verify_ms": ms(sum(r.verify_s for r in rounds)), "overhead_ms": ms(wall - fwd),
            "overhead_share": round((wall - fwd) / wall, 3) if wall > 0 else 0.0, "syncs": round(reads, 2),
            "tokens_per_round": round(sum(r.accepted + 1 for r in rounds) / n, 2),
            "modelled_ms_per_round": round(sum(r.modelled_ms for r in rounds) / n, 2)}


def step_speed(dev: torch.device, out_dir: Path) -> dict:
    """Cost per round on random models of a real shape (acceptance means nothing with random
    weights: costs, not speedups): plain decoding, HF prompt lookup, TreeGraft small and 10101
    (draft, verify, host overhead, host waits per round), TreeGraft 10101 and mid with the target
    as its own mid (accepts everything: the upper bound on tokens per round), and the target's forward
    at 64 tree nodes against 1 token. Writes speed.json and the run's headline.txt."""
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    cuda = dev.type == "cuda"
    pair, new = speed_pair(dev), SPEED_TOKENS[dev.type]
    chunk = torch.randint(0, pair.target.config.vocab_size, (48,), generator=torch.Generator().manual_seed(0)).tolist()
    ids = chunk * 4  # repeated text: prompt lookup and the n-gram drafter find drafts
    prof = clock(dev, pair)
    out: dict = {"shapes": {"target": pair.target.config.num_hidden_layers, "mid": pair.mid.config.num_hidden_layers},
                 "dtype": str(pair.dtype), "new_tokens": new, "modelled_on": prof.name, "methods": {}}

    def hf(**kw) -> dict:
        calls = []
        hook = pair.target.register_forward_pre_hook(lambda *a: calls.append(1))
        x = torch.tensor([ids], device=dev)
        try:
            with torch.inference_mode():
                if cuda:  # warm-up (the CPU run, a smoke run, skips it)
                    pair.target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=4, do_sample=False, **kw)
                calls.clear()
                sync(dev)
                t = time.perf_counter()
                got = pair.target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new, do_sample=False, **kw)
                sync(dev)
                wall = time.perf_counter() - t
        finally:
            hook.remove()
        made = got.shape[1] - len(ids)
        return {"rounds": len(calls), "ms_per_round": round(1000 * wall / len(calls), 2),
                "tokens_per_round": round(made / len(calls), 2), "note": "first round holds the prompt"}

    def tree(p, schedule: str) -> dict:
        cfg = DecodeConfig(schedule=schedule)
        if cuda:
            TreeGraftDecoder(p, cfg, profile=prof).generate(ids, max_new_tokens=4)  # warm-up
        gen = TreeGraftDecoder(p, cfg, profile=prof).generate(ids, max_new_tokens=new)
        with HostReads(dev) as reads:  # counted apart: counting slows the host
            counted = TreeGraftDecoder(p, cfg, profile=prof).generate(ids, max_new_tokens=new)
        return {**per_round([gen], reads.count / len(counted.rounds)), "wall_ms": round(1000 * gen.stats["wall_s"], 1),
                "modelled_ms": round(gen.stats["modelled_ms"], 1)}

    m = out["methods"]
    m["plain"] = hf()
    m["hf-prompt-lookup"] = hf(prompt_lookup_num_tokens=10)
    m["treegraft-small"] = tree(pair, "small")
    m["treegraft-10101"] = tree(pair, "10101")
    own = type(pair)(**{**vars(pair), "mid": pair.target})
    m["treegraft-10101-self-mid"] = tree(own, "10101")
    m["treegraft-mid-self-mid"] = tree(own, "mid")  # every step a mid step: at most depth + 1 tokens
    t = forward_times(pair.target, dev, len(ids), (1, 64), 5 if cuda else 1)["mixed"]
    out["verify_ms"] = {"1": t[1], "64": t[64], "ratio": round(t[64] / t[1], 2)}
    for k, v in m.items():
        print(f"{k:26s}", json.dumps(v))
    print("verify", json.dumps(out["verify_ms"]))
    check(m["treegraft-10101-self-mid"]["tokens_per_round"] > 1, "the target as its own mid accepted nothing")
    (out_dir / "speed.json").write_text(json.dumps(out, indent=1) + "\n")
    (out_dir / "headline.txt").write_text(headline(out, dev))
    return out


def headline(speed: dict, dev: torch.device) -> str:
    """The speed step's numbers under the summary table: the two a reader needs first."""
    m, v = speed["methods"], speed["verify_ms"]
    what = "Qwen3-8B-like bf16 target, 0.6B-like mid" if dev.type == "cuda" else "scaled-down float32 Qwen3-like pair"
    lines = [f"speed ({what}, random weights: cost per round, not speedup; modelled on {speed['modelled_on']})",
             f"  overhead share of a 10101 round: {m['treegraft-10101']['overhead_share']:.0%} "
             f"({m['treegraft-10101']['overhead_ms']} of {m['treegraft-10101']['ms_per_round']} ms)",
             f"  verify: {v['64']} ms at 64 nodes vs {v['1']} ms for 1 token ({v['ratio']}x)",
             f"  {'method':26s} {'ms/round':>9s} {'draft':>7s} {'verify':>7s} {'overhead':>8s} {'syncs':>6s} "
             f"{'tok/round':>9s} {'modelled':>9s}"]
    for name, r in m.items():
        cells = [r.get(k, "-") for k in ("ms_per_round", "draft_ms", "verify_ms", "overhead_ms", "syncs",
                                         "tokens_per_round", "modelled_ms_per_round")]
        lines.append(f"  {name:26s} {cells[0]!s:>9s} {cells[1]!s:>7s} {cells[2]!s:>7s} {cells[3]!s:>8s} "
                     f"{cells[4]!s:>6s} {cells[5]!s:>9s} {cells[6]!s:>9s}")
    return "\n".join(lines) + "\n"


STEPS = {"versions": step_versions, "load": step_load, "tree": step_tree, "cache": step_cache, "greedy": step_greedy,
         "sampling": step_sampling, "pocket": step_pocket, "hf": step_hf, "costs": step_costs,
         "profile": step_profile, "speed": step_speed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=list(STEPS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=Path("device-check"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device(args.device)
    t = time.perf_counter()
    fn = STEPS[args.step]
    status, err = "ok", ""
    try:
        result = fn(dev, args.out) if args.step in ("profile", "speed") else fn(dev)
    except Exception as e:  # recorded, then re-raised: the traceback goes to stderr
        status, err, result = "FAILED", f"{type(e).__name__}: {str(e)[:300]}", None
        raise
    finally:
        line = {"step": args.step, "device": str(dev), "status": status, "seconds": round(time.perf_counter() - t, 1),
                "error": err, "result": result}
        with open(args.out / "results.jsonl", "a") as f:
            f.write(json.dumps(line, default=str) + "\n")
        print(f"RESULT {args.step}: {status} in {line['seconds']} s {err}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
