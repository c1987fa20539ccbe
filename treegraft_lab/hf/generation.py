"""TreeGraft behind Hugging Face `generate`: what `custom_generate/generate.py` calls.

    out = target.generate(**inputs, custom_generate=treegraft_lab.hf.CUSTOM_GENERATE, trust_remote_code=True,
                          assistant_model=mid, max_new_tokens=128)

transformers 5 hands a `custom_generate` folder's `generate(model, **kwargs)` every argument of
`model.generate` (`model` instead of `self`); `treegraft_generate` turns them into one TreeGraft run:
`model` is the target, `assistant_model` the mid drafter, and a `TreeGraftDecoder` is made for the call
and driven round by round through its public round API (`start`, `run_round`), so that the streamer,
the stop tokens and the stopping criteria see every token as HF's own loop would. See
`treegraft_generate` for what is supported and what is refused.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from treegraft_lab.config import DecodeConfig
from treegraft_lab.errors import TreeGraftError

logger = logging.getLogger(__name__)

DEFAULT_PROFILE = "a100-paper"  # what prices a call when this device's profile is not cached
PREFIX = "TreeGraft custom_generate: "

# generate() arguments (HF's own names) this method does not implement, with the value that means "off"
# (None always means off as well). Anything else set to another value is refused in one line.
UNSUPPORTED_CONFIG = {
    "min_length": 0, "min_new_tokens": 0, "num_beams": 1, "num_return_sequences": 1, "num_beam_groups": 1,
    "diversity_penalty": 0.0, "penalty_alpha": None, "dola_layers": None, "constraints": None,
    "force_words_ids": None, "guidance_scale": 1.0, "min_p": None, "top_h": None, "typical_p": 1.0,
    "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "remove_invalid_values": False,
    "exponential_decay_length_penalty": None, "suppress_tokens": None, "begin_suppress_tokens": None,
    "sequence_bias": None, "token_healing": False, "watermarking_config": None, "output_scores": False,
    "output_logits": False, "output_attentions": False, "output_hidden_states": False,
    "prompt_lookup_num_tokens": None, "assistant_early_exit": None, "use_mtp": False,
}
# generate() arguments that are accepted and have nothing to do here (the decoder keeps its own caches)
IGNORED_MODEL_KWARGS = {"attention_mask", "use_cache", "cache_implementation", "return_legacy_cache"}


def _fail(msg: str) -> TreeGraftError:
    return TreeGraftError(PREFIX + msg)


def _off(value, neutral) -> bool:
    if value is None or value is False:
        return True
    if isinstance(value, (list, tuple, dict)) and not value:
        return True
    try:
        return value == neutral
    except Exception:  # an object that does not compare: it is set
        return False


def _ids_of(inputs, kwargs: dict) -> torch.Tensor:
    """The prompt ids (1, L) from `inputs` / `input_ids`, batch size 1 and unpadded."""
    if kwargs.pop("inputs_embeds", None) is not None:
        raise _fail("inputs_embeds is not supported: pass input_ids")
    ids = kwargs.pop("input_ids", None)
    if inputs is not None:
        if ids is not None:
            raise _fail("pass the prompt once: inputs or input_ids, not both")
        ids = inputs
    if ids is None:
        raise _fail("no prompt: pass input_ids (batch size 1)")
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.long, torch.int, torch.int32):
        raise _fail("input_ids must be an integer tensor of shape (1, prompt length)")
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise _fail(f"batch size {ids.shape[0] if ids.dim() == 2 else 'of shape ' + str(tuple(ids.shape))} is not "
                    "supported: TreeGraft decodes one sequence at a time (batch size 1); call generate per prompt")
    if ids.shape[1] == 0:
        raise _fail("the prompt is empty")
    mask = kwargs.get("attention_mask")
    if mask is not None and not bool(torch.as_tensor(mask).bool().all()):
        raise _fail("a padded attention_mask is not supported: pass the prompt unpadded (batch size 1)")
    return ids.long()


def _refuse_unsupported(generation_config, gen_kwargs: dict, extra: dict) -> None:
    for name, neutral in UNSUPPORTED_CONFIG.items():
        value = getattr(generation_config, name, None)
        if not _off(value, neutral):
            raise _fail(f"{name}={value!r} is not supported (set by the call or the model's generation_config; "
                        f"{name}={neutral!r} switches it off)")
    for name, value in extra.items():
        if value is not None and not (isinstance(value, (list, tuple)) and not value) and value is not False:
            raise _fail(f"{name} is not supported")
    left = sorted(k for k, v in gen_kwargs.items() if k not in IGNORED_MODEL_KWARGS and v is not None)
    if left:
        raise _fail(f"unsupported generate argument(s): {', '.join(left)}")


def _sampling(generation_config) -> dict:
    """DecodeConfig's temperature/top_k/top_p for HF's do_sample/temperature/top_k/top_p (as HF's own
    warpers: temperature, then top-k, then top-p; greedy: temperature 0)."""
    if not generation_config.do_sample:
        return {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    t = generation_config.temperature
    t = 1.0 if t is None else float(t)
    if not (t > 0 and math.isfinite(t)):
        raise _fail(f"do_sample=True needs a temperature > 0, got {t}; use do_sample=False for greedy decoding")
    k = generation_config.top_k or 0
    p = 1.0 if generation_config.top_p is None else float(generation_config.top_p)
    if not isinstance(k, int) or k < 0:
        raise _fail(f"top_k must be an integer >= 0, got {k!r}")
    if not 0 < p <= 1:
        raise _fail(f"top_p must lie in (0, 1], got {p}")
    return {"temperature": t, "top_k": k, "top_p": p}


def _config(treegraft_config, has_mid: bool, sampling: dict, seed) -> DecodeConfig:
    if treegraft_config is None:
        config = DecodeConfig() if has_mid else DecodeConfig(schedule="small")
    elif isinstance(treegraft_config, DecodeConfig):
        config = treegraft_config
    else:
        raise _fail(f"treegraft_config must be a treegraft_lab.DecodeConfig, got {type(treegraft_config).__name__}")
    if (config.temperature, config.top_k, config.top_p) != (0.0, 0, 1.0):
        raise _fail("set sampling with generate's do_sample/temperature/top_k/top_p, not in treegraft_config")
    if not has_mid and config.schedule_name not in ("small", "auto", "0" * config.depth):
        raise _fail(f"schedule {config.schedule_name!r} calls the mid drafter: pass assistant_model=<a smaller LM "
                    "with the target's tokenizer>, or treegraft_config=DecodeConfig(schedule='small')")
    if seed is None:
        seed = config.seed
    if seed is None:  # from torch's global RNG: torch.manual_seed(s) before generate makes the call reproducible
        seed = int(torch.randint(0, 2**62, (1,)).item())
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise _fail(f"treegraft_seed must be an integer >= 0, got {seed!r}")
    return replace(config, **sampling, seed=seed)


def _pair(model, mid, tokenizer, name: str | None = None):
    """A `ModelPair` over the models as they are (nothing loaded, moved or patched), named `name` or after
    the models' folders."""
    from treegraft_lab import cpu_path
    from treegraft_lab.models import ModelPair

    if mid is not None:
        sizes = [getattr(getattr(m, "config", None), "vocab_size", None) for m in (model, mid)]
        if None not in sizes and sizes[0] != sizes[1]:
            raise _fail(f"assistant_model has vocab_size {sizes[1]} but the target {sizes[0]}: TreeGraft needs a mid "
                        "drafter with exactly the target's tokenizer")

    if name is not None and (not isinstance(name, str) or not name):
        raise _fail(f"treegraft_pair_name must be a non-empty string, got {name!r}")

    def where(m) -> str:
        return str(getattr(m, "name_or_path", "") or "")

    def label(m) -> str:
        return Path(where(m)).name or type(m).__name__

    path = "treegraft-cpu" if cpu_path.installed(model) else "stock"
    return ModelPair(name or f"{label(model)}/{label(mid) if mid is not None else '-'}", tokenizer, model, mid,
                     model.get_input_embeddings().weight.device, model.dtype, target_id=where(model),
                     mid_id=where(mid) if mid is not None else "", dtype_reason="the model's own", forward_path=path)


def _profile(treegraft_profile, config: DecodeConfig, pair):
    """The decoder's device profile: the one given (a DeviceProfile, a profile name or JSON file, or "wall":
    this device's, measured once (about 40 s) and cached); else what a non-default `config.clock` names; else
    this device's cached profile if `treegraft-lab profile` (or an earlier "wall") measured it; else
    `DEFAULT_PROFILE`. Only "wall" given explicitly ever measures."""
    from treegraft_lab import costs, measure

    if treegraft_profile is not None:
        if hasattr(treegraft_profile, "target_ms"):
            return treegraft_profile
        if isinstance(treegraft_profile, (str, Path)):
            return measure.resolve(str(treegraft_profile), pair) if str(treegraft_profile) == "wall" \
                else costs.load(treegraft_profile)
        raise _fail("treegraft_profile must be a DeviceProfile, a profile name such as 'a100-paper', a JSON file "
                    f"or 'wall', got {type(treegraft_profile).__name__}")
    if config.clock != "wall":
        return costs.load(config.clock)
    return measure.cached(pair) or costs.load(DEFAULT_PROFILE)


def _stop_ids(generation_config) -> set[int]:
    eos = generation_config.eos_token_id
    if eos is None:
        return set()
    if isinstance(eos, torch.Tensor):
        eos = eos.reshape(-1).tolist()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


def _criteria(stopping_criteria, generation_config, tokenizer) -> list:
    from transformers.generation.stopping_criteria import MaxTimeCriteria, StopStringCriteria

    out = list(stopping_criteria or [])
    if generation_config.max_time is not None:
        out.append(MaxTimeCriteria(max_time=generation_config.max_time))
    if generation_config.stop_strings is not None:
        if tokenizer is None:
            raise _fail("stop_strings needs the tokenizer: pass tokenizer=... to generate")
        out.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=generation_config.stop_strings))
    return out


def _done(criteria: list, seq: torch.Tensor) -> bool:
    return any(bool(torch.as_tensor(c(seq, None)).any()) for c in criteria)


def _max_new(generation_config, prompt_len: int) -> int:
    if generation_config.max_new_tokens is not None:
        n = generation_config.max_new_tokens
    else:
        n = (generation_config.max_length or 20) - prompt_len
    if not isinstance(n, int) or n < 1:
        raise _fail(f"nothing to generate: max_new_tokens is {n} (prompt of {prompt_len} tokens, max_length "
                    f"{generation_config.max_length}); pass max_new_tokens >= 1")
    return n


@dataclass
class GenerateCall:
    """One `generate` call's arguments, checked: the prompt, HF's and the decoder's configs, when to stop."""

    ids: torch.Tensor  # (1, L), on the device the output goes to
    prompt: list[int]
    generation_config: Any
    config: DecodeConfig
    tokenizer: Any
    max_new: int
    stop: set[int]
    criteria: list


def _prepare_call(model, inputs, generation_config, stopping_criteria, kwargs: dict, extra: dict, treegraft_config,
                  has_mid: bool, seed) -> GenerateCall:
    """generate's arguments checked and resolved (HF's generation config, the decoder's config and its seed, the
    token budget, stop tokens and criteria); whatever is not supported is refused first, in one line."""
    if not hasattr(model, "_prepare_generation_config"):
        raise _fail("model must be a transformers causal LM (a GenerationMixin with transformers >= 5)")
    tokenizer = kwargs.pop("tokenizer", None)
    extra = {**extra, "assistant_tokenizer": kwargs.pop("assistant_tokenizer", None),
             "past_key_values": kwargs.pop("past_key_values", None), "cache": kwargs.pop("cache", None)}
    ids = _ids_of(inputs, kwargs)
    generation_config, gen_kwargs = model._prepare_generation_config(generation_config, **kwargs)
    _refuse_unsupported(generation_config, gen_kwargs, extra)
    config = _config(treegraft_config, has_mid, _sampling(generation_config), seed)
    prompt = ids[0].tolist()
    max_new = _max_new(generation_config, len(prompt))
    stop = _stop_ids(generation_config)
    criteria = _criteria(stopping_criteria, generation_config, tokenizer)
    return GenerateCall(ids, prompt, generation_config, config, tokenizer, max_new, stop, criteria)


def _decoder(call: GenerateCall, model, mid, treegraft_profile, name: str | None):
    """A fresh `TreeGraftDecoder` over the models as they are, on its device profile; refused if the prompt
    and the new tokens do not fit."""
    from treegraft_lab.decoder import TreeGraftDecoder

    pair = _pair(model, mid, call.tokenizer, name)
    profile = _profile(treegraft_profile, call.config, pair)
    dec = TreeGraftDecoder(pair, call.config, profile=profile)
    try:
        dec.check_room(len(call.prompt), call.max_new)
    except TreeGraftError as e:
        raise _fail(str(e)) from None
    logger.info("TreeGraft: pair %s, schedule %s, prune %s, profile %s", pair.name, dec.config.schedule_name,
                dec.config.prune, profile.name)
    return dec


def emit_tokens(emitted: list[int], out: list[int], call: GenerateCall, streamer) -> bool:
    """Append a round's tokens to `out` (each streamed) up to the first stop; True once generation is done."""
    seq = torch.tensor([call.prompt + out + emitted], dtype=torch.long, device=call.ids.device) if call.criteria else None
    for tok in emitted:
        out.append(tok)
        if streamer is not None:
            streamer.put(torch.tensor([tok]))
        if len(out) >= call.max_new or tok in call.stop or (
                bool(call.criteria) and _done(call.criteria, seq[:, : len(call.prompt) + len(out)])):
            return True
    return False


def _run_rounds(dec, call: GenerateCall, streamer) -> list[int]:
    """The new tokens: the decoder started on the prompt, then round after round until a stop (the streamer
    is given the prompt first and ended last, whatever happens)."""
    out: list[int] = []
    if streamer is not None:
        streamer.put(call.ids.cpu())
    try:
        with torch.no_grad():
            t0 = time.perf_counter()
            dec.start(call.prompt, prefill_token=not call.config.fuse_prompt)
            emitted = list(dec.first)
            while not emit_tokens(emitted, out, call, streamer):
                _, emitted = dec.run_round()
                dec.round_idx += 1
            logger.info("TreeGraft: %d new tokens in %d rounds, %.2f s", len(out), dec.round_idx,
                        time.perf_counter() - t0)
    finally:
        if streamer is not None:
            streamer.end()
    return out


def _output(call: GenerateCall, out: list[int]):
    """What HF `generate` returns: the sequences (1, prompt + new tokens), in a `GenerateDecoderOnlyOutput`
    with `return_dict_in_generate`."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    sequences = torch.tensor([call.prompt + out], dtype=torch.long, device=call.ids.device)
    if call.generation_config.return_dict_in_generate:
        return GenerateDecoderOnlyOutput(sequences=sequences)
    return sequences


def treegraft_generate(model, inputs=None, generation_config=None, logits_processor=None, stopping_criteria=None,
                       prefix_allowed_tokens_fn=None, synced_gpus=None, assistant_model=None, streamer=None,
                       negative_prompt_ids=None, negative_prompt_attention_mask=None, *, treegraft_config=None,
                       treegraft_profile=None, treegraft_seed=None, treegraft_pair_name=None, **kwargs):
    """`model.generate(...)` decoded losslessly by TreeGraft (`model`: the target; batch size 1).

    Returns what HF `generate` returns: a LongTensor (1, prompt + new tokens), or with
    `return_dict_in_generate=True` a `GenerateDecoderOnlyOutput` holding only `sequences`.

    - `assistant_model`: the mid drafter, a smaller causal LM with exactly the target's tokenizer (the offline
      pair's pocket drafter, or any HF model of the target's family). Without one TreeGraft runs all-small: only
      the small drafters (n-gram + Token Recycling, and prompt lookup's chain) grow the tree
      (`DecodeConfig(schedule="small")`); a `treegraft_config` whose schedule calls the mid drafter is then
      refused.
    - `do_sample=False` (HF's default): greedy acceptance, token for token HF's greedy output. `do_sample=True`:
      multi-branch rejection sampling on the target's distribution warped as HF warps it (`temperature`, then
      `top_k` (HF's default 50), then `top_p`), so every token follows that distribution. The seed is
      `treegraft_seed`, else `treegraft_config.seed`, else drawn from torch's global RNG: `torch.manual_seed(s)`
      before the call makes it reproducible (the draft trees, and so the random draws, differ from HF's sampling
      loop: same distribution, not the same samples).
    - Stops, as HF does, at `max_new_tokens` (else `max_length`), after an `eos_token_id` of the generation
      config (the model's `generation_config` unless given), at `stop_strings` (with `tokenizer=`), at
      `max_time`, and when a `stopping_criteria` entry says so: every criterion is asked after each new token,
      on the sequence so far, `scores=None`; tokens a round drafted past the stop are dropped.
    - `streamer`: `put` the prompt (1, L) first, as HF does, then every new token once, in order, as a (1,)
      tensor, then `end()`.
    - `treegraft_config`: a `DecodeConfig` (tree growth, small drafters, schedule, budget, pruning); its
      temperature/top_k/top_p must stay at their defaults (sampling is set through generate's arguments).
      Default: the project's `DecodeConfig()` with a mid drafter (whatever schedule and pruning it chooses for
      the pair and profile, said in one line by the decoder), `DecodeConfig(schedule="small")` without one. Name
      a schedule (`DecodeConfig(schedule="10101")`) to have the mid drafter graft in every round.
    - `treegraft_pair_name`: the name the pair's trained artifacts (adaptive scheduler, fitted rules) are looked
      up by, e.g. "smollm2-pocket" for the offline pair; default: made from the models' folder names, which has
      none (or pass `scheduler_path` in the config).
    - `treegraft_profile`: the device profile the decoder decides on and prices rounds with (a `DeviceProfile`,
      a name such as "a100-paper", a JSON file, or "wall": this device's, measured once, about 40 s, then
      cached). Default: the config's clock when it is not "wall"; else this device's profile if it is cached for
      these models (`treegraft-lab profile` on a pair loaded alike, or an earlier "wall"); else "a100-paper"
      (never measured during a call). Under a fixed schedule with top-k pruning the profile only prices rounds;
      schedule and prune "auto", value pruning, budget "auto" and the adaptive schedule decide on it. On a CPU,
      where every verified node costs, "a100-paper" prices them nearly free: measure this device once
      (`treegraft_profile="wall"`), or give a smaller `budget` in the config.
    - Each call makes a fresh decoder: nothing (e.g. Token Recycling's matrix) is carried from one call to the
      next, so a call's output depends only on its arguments and seed.

    Not supported, refused in one line: batch size > 1, padded attention masks, `inputs_embeds`, beam search and
    every other decoding mode, `num_return_sequences` > 1, logits processors (`logits_processor`,
    `repetition_penalty`, `min_p`, `typical_p`, `no_repeat_ngram_size`, `bad_words_ids`, `min_new_tokens`,
    `suppress_tokens`, ...), `prefix_allowed_tokens_fn`, negative prompts, `output_scores` / `output_logits` /
    `output_attentions` / `output_hidden_states`, a `past_key_values` / cache to continue from,
    `assistant_tokenizer` (universal assisted generation), `synced_gpus`. The returned output holds no cache:
    the decoder's KV caches are its own.
    """
    extra = {"logits_processor": logits_processor, "prefix_allowed_tokens_fn": prefix_allowed_tokens_fn,
             "synced_gpus": synced_gpus, "negative_prompt_ids": negative_prompt_ids,
             "negative_prompt_attention_mask": negative_prompt_attention_mask}
    call = _prepare_call(model, inputs, generation_config, stopping_criteria, kwargs, extra, treegraft_config,
                         assistant_model is not None, treegraft_seed)
    dec = _decoder(call, model, assistant_model, treegraft_profile, treegraft_pair_name)
    return _output(call, _run_rounds(dec, call, streamer))
