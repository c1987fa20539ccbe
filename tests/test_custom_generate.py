"""TreeGraft inside Hugging Face `generate` (`custom_generate=treegraft_lab.hf.CUSTOM_GENERATE`): greedy is
HF's greedy token for token, sampling is reproducible from a seed, the streamer, stop tokens and stopping
criteria behave as HF's, and what is not supported is refused in one line. The fast tests run on the tiny
random pair; the slow ones on the offline pair (smollm2-pocket) and the prompt suite."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList, TextStreamer
from transformers.generation.logits_process import TemperatureLogitsWarper
from transformers.generation.streamers import BaseStreamer
from transformers.generation.utils import GenerateDecoderOnlyOutput

from treegraft_lab import costs, measure
from treegraft_lab.config import DecodeConfig
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.hf import CUSTOM_GENERATE
from treegraft_lab.tiny import tiny_pair

TG = {"custom_generate": CUSTOM_GENERATE, "trust_remote_code": True}
PROMPTS = [
    [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7],  # repetitive: the small drafters find matches
    [1, 2, 3, 4, 10, 11, 12, 13, 14, 40, 41, 3, 4, 10],
    list(range(20, 50)),
]


class Recording(BaseStreamer):
    """Every call a streamer gets, in order: ("put", ids) and ("end", None)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list | None]] = []

    def put(self, value) -> None:
        self.calls.append(("put", value.tolist()))

    def end(self) -> None:
        self.calls.append(("end", None))


class StopAtLength(StoppingCriteria):
    def __init__(self, length: int) -> None:
        self.length, self.seen = length, []

    def __call__(self, input_ids, scores, **kwargs):
        self.seen.append(input_ids.shape[1])
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool)


def check_streamed(rec: Recording, prompt: list[int], sequence: list[int]) -> None:
    """The prompt put first as (1, L), then each new token once, in order, as (1,), then end() once."""
    kinds = [k for k, _ in rec.calls]
    assert kinds[0] == "put" and kinds[-1] == "end" and kinds.count("end") == 1
    assert rec.calls[0][1] == [prompt]
    puts = [v for k, v in rec.calls[1:-1]]
    assert all(len(v) == 1 and isinstance(v[0], int) for v in puts), puts
    assert [v[0] for v in puts] == sequence[len(prompt):]


def one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg and msg.startswith("TreeGraft custom_generate: "), msg
    return msg


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: on a busy 2-core machine two threads spin against other processes (a tiny model's
    forward then takes 10-20x longer); restored after the module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------- the tiny random pair


@pytest.fixture(scope="module")
def tiny():
    return tiny_pair("llama", vocab=64, scale=4.0)


def hf(model, ids, n, **kw):
    return model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, **kw)[0].tolist()


def test_the_folder_is_a_custom_generate_repo_given_as_a_string():
    assert isinstance(CUSTOM_GENERATE, str)  # generate() loads only a str as a folder or repo id
    root = Path(CUSTOM_GENERATE)
    assert (root / "custom_generate" / "generate.py").is_file() and (root / "README.md").is_file()
    assert (root / "custom_generate" / "requirements.txt").read_text().split() == ["treegraft-lab"]


@pytest.mark.parametrize("settings", [{}, {"schedule": "10101"}, {"schedule": "mid", "prune": "value"}])
def test_tiny_greedy_is_hf_greedy_with_and_without_the_mid_drafter(tiny, settings):
    cfg = {"treegraft_config": DecodeConfig(**settings)} if settings else {}
    for ids in PROMPTS:
        ref = hf(tiny.target, ids, 24)
        out = tiny.target.generate(torch.tensor([ids]), assistant_model=tiny.mid, max_new_tokens=24, **cfg, **TG)
        assert out.dtype == torch.long and out[0].tolist() == ref
        if not settings:  # no assistant: all-small
            assert tiny.target.generate(torch.tensor([ids]), max_new_tokens=24, **TG)[0].tolist() == ref


def test_tiny_return_dict_and_max_length(tiny):
    ids = PROMPTS[1]
    out = tiny.target.generate(torch.tensor([ids]), assistant_model=tiny.mid, max_new_tokens=16,
                               return_dict_in_generate=True, **TG)
    assert isinstance(out, GenerateDecoderOnlyOutput) and out.scores is None
    assert out.sequences[0].tolist() == hf(tiny.target, ids, 16)
    by_length = tiny.target.generate(torch.tensor([ids]), max_length=len(ids) + 9, **TG)
    assert by_length[0].tolist() == hf(tiny.target, ids, 9)


def test_tiny_sampling_is_reproducible_from_torchs_seed_or_a_kwarg(tiny):
    ids = torch.tensor([PROMPTS[2]])
    kw = dict(assistant_model=tiny.mid, max_new_tokens=24, do_sample=True, temperature=1.5, top_k=0,
              treegraft_config=DecodeConfig(schedule="10101"), **TG)

    def sample(seed, **more):
        torch.manual_seed(seed)
        return tiny.target.generate(ids, **kw, **more)[0].tolist()

    a, b, c = sample(0), sample(0), sample(1)
    assert a == b and a != c and len(a) == ids.shape[1] + 24
    assert sample(5, treegraft_seed=7) == sample(6, treegraft_seed=7) != sample(5, treegraft_seed=8)


def test_tiny_streamers_get_the_prompt_then_every_new_token_once_then_end(tiny, capsys):
    ids = PROMPTS[0]
    rec = Recording()
    out = tiny.target.generate(torch.tensor([ids]), assistant_model=tiny.mid, max_new_tokens=20, streamer=rec,
                               treegraft_config=DecodeConfig(schedule="10101"), **TG)[0].tolist()
    check_streamed(rec, ids, out)
    capsys.readouterr()
    tiny.target.generate(torch.tensor([ids]), max_new_tokens=20, streamer=TextStreamer(tiny.tokenizer, skip_prompt=True),
                         **TG)
    assert capsys.readouterr().out.strip() == tiny.tokenizer.decode(out[len(ids):])


def test_tiny_eos_and_stopping_criteria_stop_where_hf_stops(tiny):
    ids = PROMPTS[2]
    new = hf(tiny.target, ids, 24)[len(ids):]
    eos = new[6]
    want = hf(tiny.target, ids, 24, eos_token_id=eos, pad_token_id=eos)
    assert want == ids + new[: new.index(eos) + 1]
    got = tiny.target.generate(torch.tensor([ids]), assistant_model=tiny.mid, max_new_tokens=24, eos_token_id=eos,
                               treegraft_config=DecodeConfig(schedule="10101"), **TG)[0].tolist()
    assert got == want
    stop = StopAtLength(len(ids) + 7)
    got = tiny.target.generate(torch.tensor([ids]), max_new_tokens=24, stopping_criteria=StoppingCriteriaList([stop]),
                               **TG)[0].tolist()
    assert got == hf(tiny.target, ids, 24, stopping_criteria=StoppingCriteriaList([StopAtLength(len(ids) + 7)]))
    assert got == ids + new[:7] and stop.seen == list(range(len(ids) + 1, len(ids) + 8))  # asked after each token


def test_a_rounds_tokens_are_kept_and_streamed_up_to_the_first_stop():
    from treegraft_lab.hf.generation import GenerateCall, emit_tokens

    def call(max_new=10, stop=(), criteria=()):
        return GenerateCall(torch.tensor([[1, 2]]), [1, 2], None, DecodeConfig(), None, max_new, set(stop), list(criteria))

    rec, out = Recording(), [7]
    assert not emit_tokens([8, 9], out, call(), rec) and out == [7, 8, 9]  # no stop: the next round follows
    assert rec.calls == [("put", [8]), ("put", [9])]
    out = []
    assert emit_tokens([3, 4, 5, 6], out, call(stop={5}), None) and out == [3, 4, 5]  # the stop token is kept
    out = []
    assert emit_tokens([3, 4, 5], out, call(max_new=2), None) and out == [3, 4]
    stop = StopAtLength(5)  # prompt 2 + 3 new tokens
    out = []
    assert emit_tokens([3, 4, 5, 6], out, call(criteria=[stop]), None) and out == [3, 4, 5] and stop.seen == [3, 4, 5]
    assert not emit_tokens([], out, call(), None)


@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(input_ids=torch.tensor([PROMPTS[0], PROMPTS[0]])), "batch size 2 is not supported"),
    (dict(num_beams=2), "num_beams=2 is not supported"),
    (dict(repetition_penalty=1.3), "repetition_penalty=1.3 is not supported"),
    (dict(min_new_tokens=4), "min_new_tokens=4 is not supported"),
    (dict(output_scores=True, return_dict_in_generate=True), "output_scores=True is not supported"),
    (dict(logits_processor=LogitsProcessorList([TemperatureLogitsWarper(0.5)])), "logits_processor is not supported"),
    (dict(attention_mask=torch.tensor([[0] + [1] * 12])), "a padded attention_mask is not supported"),
    (dict(no_such_option=1), "unsupported generate argument(s): no_such_option"),
    (dict(do_sample=True, temperature=0.0), "do_sample=True needs a temperature > 0"),
    (dict(treegraft_config=DecodeConfig(temperature=0.7)), "set sampling with generate's do_sample"),
    (dict(treegraft_config=DecodeConfig(schedule="10101"), assistant_model=None), "calls the mid drafter: pass assistant_model"),
    (dict(treegraft_profile=3), "treegraft_profile must be"),
    (dict(treegraft_pair_name=""), "treegraft_pair_name must be a non-empty string"),
])
def test_tiny_unsupported_options_are_refused_in_one_line(tiny, kwargs, says):
    kw = {"input_ids": torch.tensor([PROMPTS[0]]), "assistant_model": tiny.mid, "max_new_tokens": 8, **kwargs}
    with pytest.raises(TreeGraftError) as e:
        tiny.target.generate(**kw, **TG)
    assert says in one_line(e)


def test_tiny_profile_default_never_measures_and_a_given_profile_is_used(tiny, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TREEGRAFT_PROFILE_CACHE", str(tmp_path / "profiles"))
    for name in ("measure", "measure_checked", "for_pair"):
        monkeypatch.setattr(measure, name, lambda *a, **k: pytest.fail("a generate call measured the device"))
    ids, ref = torch.tensor([PROMPTS[0]]), hf(tiny.target, PROMPTS[0], 12)
    toy = costs.DeviceProfile("toy", {1: 10.0, 64: 20.0}, {1: 2.0, 100: 8.0}, 0.5)
    cases = [({}, "a100-paper"), ({"treegraft_profile": toy}, "toy"),
             ({"treegraft_profile": str(toy.save(tmp_path / "toy.json"))}, "toy"),
             ({"treegraft_config": DecodeConfig(clock="a100-paper", prune="value")}, "a100-paper")]
    with caplog.at_level(logging.INFO, logger="treegraft_lab.hf.generation"):
        for kw, name in cases:
            caplog.clear()
            out = tiny.target.generate(ids, assistant_model=tiny.mid, max_new_tokens=12, **kw, **TG)
            assert out[0].tolist() == ref
            assert f"profile {name}" in caplog.text, (kw, caplog.text)


# ---------------------------------------------------------------------------------- the offline pair


@pytest.fixture(scope="module")
def pocket(smollm2_dir):
    from treegraft_lab import load_pair

    return load_pair(dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def suite(pocket):
    """Twelve eval prompts (two per category), chat-templated, with HF's greedy continuation of 24 tokens."""
    from treegraft_lab import load_prompts

    rows = []
    for q in load_prompts(per_category=2):
        enc = pocket.tokenizer.apply_chat_template([{"role": "user", "content": q["turns"][0]}],
                                                   add_generation_prompt=True, return_tensors="pt", return_dict=True)
        inputs = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        rows.append((q["question_id"], inputs, pocket.target.generate(**inputs, max_new_tokens=24, do_sample=False)))
    assert len(rows) == 12
    return rows


def chat(pocket, text: str) -> dict:
    enc = pocket.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                               return_tensors="pt", return_dict=True)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


@pytest.mark.slow
def test_pocket_greedy_is_hf_greedy_on_twelve_suite_prompts(pocket, suite):
    # all-small and the paper's fixed schedule (mid calls), on small verification budgets: on a CPU every
    # verified node costs, and the default profile (a100-paper) would verify 63 of them a round
    for i, (qid, inputs, ref) in enumerate(suite):
        cfg = {"treegraft_config": DecodeConfig(schedule="small" if i % 3 else "10101", budget=12)}
        out = pocket.target.generate(**inputs, assistant_model=pocket.mid, max_new_tokens=24, do_sample=False,
                                     **cfg, **TG)
        assert out.tolist() == ref.tolist(), qid


@pytest.mark.slow
def test_pocket_return_dict_gives_the_same_sequences(pocket, suite, caplog):
    _, inputs, ref = suite[4]  # the default config, the pair named as registered (its trained artifacts apply)
    with caplog.at_level(logging.INFO, logger="treegraft_lab.hf.generation"):
        out = pocket.target.generate(**inputs, assistant_model=pocket.mid, max_new_tokens=24,
                                     return_dict_in_generate=True, treegraft_pair_name="smollm2-pocket", **TG)
    assert isinstance(out, GenerateDecoderOnlyOutput) and torch.equal(out.sequences, ref)
    assert "pair smollm2-pocket" in caplog.text


@pytest.mark.slow
def test_pocket_sampling_is_reproducible_with_a_fixed_seed(pocket):
    inputs = chat(pocket, "Write a short poem about the sea.")
    kw = dict(assistant_model=pocket.mid, max_new_tokens=12, do_sample=True, temperature=1.0, top_p=0.95,
              treegraft_config=DecodeConfig(schedule="small", budget=12), **TG)

    def sample(seed):
        torch.manual_seed(seed)
        return pocket.target.generate(**inputs, **kw).tolist()

    a = sample(0)
    assert a == sample(0) and a != sample(1)


@pytest.mark.slow
def test_pocket_streamer_eos_stop_strings_and_a_bad_option(pocket):
    inputs = chat(pocket, "What is the capital of France?")
    prompt = inputs["input_ids"][0].tolist()
    ref = pocket.target.generate(**inputs, max_new_tokens=40, do_sample=False)[0].tolist()
    eos = pocket.target.generation_config.eos_token_id
    assert ref[-1] == eos and len(ref) < len(prompt) + 40, "the reference answer should end with <|im_end|>"
    rec = Recording()
    out = pocket.target.generate(**inputs, assistant_model=pocket.mid, max_new_tokens=40, streamer=rec,
                                 treegraft_config=DecodeConfig(schedule="10101", budget=12), **TG)[0].tolist()
    assert out == ref  # stopped at the model's eos, as HF
    check_streamed(rec, prompt, out)
    word = pocket.tokenizer.decode(ref[len(prompt):]).split()[2]  # a word of the answer: stop once it is written
    want = pocket.target.generate(**inputs, max_new_tokens=40, do_sample=False, stop_strings=[word],
                                  tokenizer=pocket.tokenizer)[0].tolist()
    got = pocket.target.generate(**inputs, assistant_model=pocket.mid, max_new_tokens=40, stop_strings=[word],
                                 tokenizer=pocket.tokenizer, **TG)[0].tolist()
    assert got == want and len(got) < len(ref)
    two = pocket.tokenizer(["Hi", "Hello there"], return_tensors="pt", padding=True)
    with pytest.raises(TreeGraftError) as e:
        pocket.target.generate(**two, assistant_model=pocket.mid, max_new_tokens=4, **TG)
    assert "batch size 2 is not supported" in one_line(e)
