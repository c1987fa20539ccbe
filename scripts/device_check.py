"""One step of the device check (`scripts/device_check.sh` runs them all, each in its own process).

    PYTHONPATH=. python3 scripts/device_check.py STEP --device cuda --out DIR

Steps: versions, load, tree, cache, greedy, sampling, pocket, hf, costs, profile. A step prints what it
measured, appends one JSON line to DIR/results.jsonl, ends with a `RESULT` line and exits 1 when a
check fails (the traceback goes to stderr). It needs torch and transformers only (no plotly, no
ipywidgets): a bare GPU machine's python3 runs it with the project on PYTHONPATH.

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


def clock(device: torch.device) -> str:
    """The decoding steps' clock: the named a100-paper profile (decisions and pricing read it), so
    that measuring this device's profile is one step of its own (`costs`), not a part of each."""
    return "a100-paper"


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
    for mod in ("plotly", "ipywidgets"):
        try:
            __import__(mod)
            out[mod] = "present"
        except ImportError:
            out[mod] = "absent"
    check(dev.type != "cuda" or torch.cuda.is_available(), "DEVICE=cuda but torch sees no GPU")
    print(json.dumps(out, indent=1))
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
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock=clock(dev)))
        dec.generate(ids, max_new_tokens=20)
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
    from treegraft_lab.commands.check_lossless import _divergence
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
            for schedule in ("small", "mid", "10101", "oracle"):
                match, gaps = 0, []
                for p, ref in zip(prompts, refs):
                    ours = TreeGraftDecoder(pair, DecodeConfig(schedule=schedule, clock=clock(dev))).generate(p, max_new_tokens=new).token_ids
                    if ours == ref:
                        match += 1
                        continue
                    d = _divergence(pair, p, ours, ref)
                    gaps.append(d)
                    if pair.dtype == torch.float32 or not d.get("numerics"):
                        beyond.append((arch, schedule, f32, d))
                key = f"{arch}-{schedule}" + ("-f32logits" if f32 else "")
                out[key] = {"match_rate": match / len(prompts), "mismatches": gaps}
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
        runs, new = {}, 24 if dev.type == "cuda" else 12
        for seed in (0, 0, 1):
            cfg = DecodeConfig(schedule="10101", temperature=1.0, top_p=0.95, seed=seed, clock=clock(dev))
            runs.setdefault(seed, []).append(TreeGraftDecoder(pair, cfg).generate(ids, max_new_tokens=new).token_ids)
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
    ours = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock=clock(dev))).generate(ids, max_new_tokens=24).token_ids
    out = {"devices": where, "matches_greedy": ours == ref}
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
    and a decode that reads it (`clock=` the measured profile, value pruning)."""
    from treegraft_lab import measure
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    pair = load("llama", dev)
    prof = measure.measure(pair, progress=False, repeats=1 if dev.type == "cpu" else 3)
    ids = prompt_ids(pair, 50)
    gen = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock=prof, prune="value")).generate(ids, max_new_tokens=12)
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


def step_profile(dev: torch.device, out_dir: Path) -> dict:
    """Forward time of n tree tokens (1-128) after a 256- and a 2,048-token context, for random
    models shaped like Qwen3-8B and 0.6B (on the CPU: 2 layers at 1/8 width, a short sweep)."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    from treegraft_lab import kv

    cuda = dev.type == "cuda"
    ns = (1, 2, 4, 8, 16, 32, 64, 128) if cuda else (1, 8, 32)
    ctxs = (256, 2048) if cuda else (64, 256)
    repeats = 7 if cuda else 2
    dtype = torch.bfloat16 if cuda else torch.float32
    res: dict = {"device": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
                 "dtype": str(dtype), "unit": "ms per forward (median)", "models": {}}
    for name, shape in PROFILE_MODELS.items():
        shape = dict(shape)
        if not cuda:
            shape.update(hidden_size=shape["hidden_size"] // 8, intermediate_size=shape["intermediate_size"] // 8,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                         vocab_size=4096)
        cfg = Qwen3Config(**shape, max_position_embeddings=4096, tie_word_embeddings=False)
        torch.manual_seed(0)
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa").eval()
        if cuda:
            kv.use_folded_attention(model)
        table = {}
        for ctx in ctxs:
            cache = kv.new_cache(model)
            kv.prefill(model, cache, torch.randint(0, shape["vocab_size"], (ctx,)).tolist())
            for n in ns:
                allowed = torch.ones(n, ctx + n, dtype=torch.bool)
                allowed[:, ctx:] = torch.ones(n, n, dtype=torch.bool).tril()
                pos = torch.arange(ctx, ctx + n)
                toks = torch.randint(0, shape["vocab_size"], (n,)).tolist()
                times = []
                for r in range(repeats + 1):
                    sync(dev)
                    t = time.perf_counter()
                    kv.masked_forward(model, cache, toks, pos, allowed)
                    sync(dev)
                    if r:
                        times.append(1000 * (time.perf_counter() - t))
                    kv.truncate(cache, ctx)
                table[f"ctx{ctx}-n{n}"] = round(statistics.median(times), 3)
        res["models"][name] = {"shape": shape, "ms": table}
        print(name, json.dumps(table))
        del model
        if cuda:
            torch.cuda.empty_cache()
    (out_dir / "profile.json").write_text(json.dumps(res, indent=1) + "\n")
    return res


STEPS = {"versions": step_versions, "load": step_load, "tree": step_tree, "cache": step_cache, "greedy": step_greedy,
         "sampling": step_sampling, "pocket": step_pocket, "hf": step_hf, "costs": step_costs,
         "profile": step_profile}


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
        result = fn(dev, args.out) if args.step == "profile" else fn(dev)
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
