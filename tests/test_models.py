"""The pair loader on tiny random Llama / Qwen3 models (the paper's architectures), on CPU."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest
import torch

from treegraft_lab import models
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.models import (
    PAIRS,
    check_same_tokenizer,
    load_kwargs,
    load_pair,
    resolve_device,
    resolve_dtype,
)


def test_loads_llama_target_with_qwen3_mid(tiny_llama_dir, tiny_qwen3_dir):
    pair = load_pair(target=tiny_llama_dir, mid=tiny_qwen3_dir, dtype="float32")
    assert pair.device == torch.device("cpu") and pair.dtype == torch.float32
    assert type(pair.target).__name__ == "LlamaForCausalLM"
    assert type(pair.mid).__name__ == "Qwen3ForCausalLM"
    for m in (pair.target, pair.mid):
        assert not m.training
        assert m.dtype == torch.float32
        assert m.config._attn_implementation == "sdpa"
    assert pair.name == f"{tiny_llama_dir.name}/{tiny_qwen3_dir.name}"
    ids = pair.tokenizer("hello world", return_tensors="pt").input_ids
    with torch.no_grad():
        a, b = pair.target(ids).logits, pair.mid(ids).logits
    assert a.shape == b.shape and a.shape[-1] >= len(pair.tokenizer)


def test_auto_dtype_follows_cpu_bf16_support(tiny_llama_dir, tiny_qwen3_dir, monkeypatch):
    monkeypatch.setattr(models, "cpu_supports_bf16", lambda: False)
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    monkeypatch.setattr(models, "cpu_supports_bf16", lambda: True)
    pair = load_pair(target=tiny_llama_dir, mid=tiny_qwen3_dir)
    assert pair.dtype == torch.bfloat16
    assert pair.target.dtype == pair.mid.dtype == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16


def test_device_and_dtype_arguments():
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == want
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16
    assert resolve_dtype(torch.bfloat16, torch.device("cpu")) == torch.bfloat16
    with pytest.raises(TreeGraftError, match="unknown dtype 'float64'"):
        resolve_dtype("float64", torch.device("cpu"))
    with pytest.raises(TreeGraftError, match="unknown device"):
        resolve_device("tpu-ish")
    if not torch.cuda.is_available():
        with pytest.raises(TreeGraftError, match="CUDA is not available"):
            resolve_device("cuda")


def test_cuda_loads_in_bf16_on_one_gpu_unless_placed():
    # The paper's pairs' path, checkable without a GPU: what from_pretrained is given (the spread
    # case and its max_memory come from models.plan_placement: tests/test_gpu_path.py).
    kw = load_kwargs(torch.device("cuda"), resolve_dtype("auto", torch.device("cuda")))
    assert kw == {"dtype": torch.bfloat16, "attn_implementation": "sdpa", "device_map": {"": 0}}
    assert load_kwargs(torch.device("cuda:1"), torch.bfloat16)["device_map"] == {"": 1}
    assert "device_map" not in load_kwargs(torch.device("cpu"), torch.float32)


def test_mismatched_tokenizer_is_refused_naming_both(tmp_path, tiny_model, tiny_llama_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    tok.add_tokens(["<graft_a>", "<graft_b>"])
    other = tiny_model(tmp_path / "other-vocab", "qwen3", tok)
    with pytest.raises(TreeGraftError) as e:
        load_pair(target=tiny_llama_dir, mid=other, dtype="float32")
    msg = str(e.value)
    assert str(tiny_llama_dir) in msg and str(other) in msg and "tokenizer" in msg
    assert "49152 vs 49154" in msg


class FakeTok:
    def __init__(self, vocab, bos=1, eos=2, pad=None):
        self.vocab, self.bos_token_id, self.eos_token_id, self.pad_token_id = vocab, bos, eos, pad

    def __len__(self):
        return len(self.vocab)

    def get_vocab(self):
        return dict(self.vocab)


def test_check_same_tokenizer_compares_map_and_special_ids():
    a = FakeTok({"a": 0, "b": 1, "c": 2})
    check_same_tokenizer(a, FakeTok({"a": 0, "b": 1, "c": 2}), "A", "B")
    with pytest.raises(TreeGraftError, match=r"'A' and 'B'.*token->id entries differ"):
        check_same_tokenizer(a, FakeTok({"a": 0, "b": 2, "c": 1}), "A", "B")
    with pytest.raises(TreeGraftError, match="eos 2 vs 0"):
        check_same_tokenizer(a, FakeTok({"a": 0, "b": 1, "c": 2}, eos=0), "A", "B")
    with pytest.raises(TreeGraftError, match="3 vs 2 tokens"):
        check_same_tokenizer(a, FakeTok({"a": 0, "b": 1}), "A", "B")


def test_mid_without_tokenizer_must_cover_the_vocabulary(tmp_path, tiny_model, tiny_llama_dir):
    small = tiny_model(tmp_path / "small-vocab", "llama", vocab_size=1000)
    with pytest.raises(TreeGraftError, match=r"vocab_size 1000 \(its config.json\) but the target's tokenizer has 49152"):
        load_pair(target=tiny_llama_dir, mid=small, dtype="float32")


def test_unknown_pair_lists_the_known_ones():
    with pytest.raises(TreeGraftError) as e:
        load_pair("qwen3-33b/1.7b")
    assert "unknown pair 'qwen3-33b/1.7b'" in str(e.value)
    assert all(name in str(e.value) for name in PAIRS)


def test_the_pairs_specs_are_the_named_pairs_unless_a_model_is_given(tmp_path):
    from treegraft_lab.presets import DEFAULT_PAIR

    assert models.pair_specs(None, None, None, True) == (DEFAULT_PAIR, *PAIRS[DEFAULT_PAIR])
    assert models.pair_specs("qwen3-32b/1.7b", None, "m", True) == ("qwen3-32b/1.7b", "qwen3-32b", "m")
    assert models.pair_specs(None, "t", None, False) == (None, "t", None)
    with pytest.raises(TreeGraftError, match="does not exist"):  # a missing target folder is named first
        models.pair_specs(None, tmp_path / "nope", None, True)
    with pytest.raises(TreeGraftError, match="no mid drafter given"):
        models.pair_specs(None, "qwen3-32b", None, True)


def test_a_mid_that_cannot_be_found_is_skipped_with_a_warning_only_if_not_required(tmp_path, tiny_llama_dir):
    cpu = torch.device("cpu")
    assert models.resolve_mid(None, cpu, True) == (None, None, 4)
    with pytest.warns(UserWarning, match="loading the target alone: .*does not exist"):
        assert models.resolve_mid(str(tmp_path / "nope"), cpu, False) == (None, None, 4)
    with pytest.warns(UserWarning, match="loading the target alone") as w:
        assert load_pair(target=tiny_llama_dir, mid=str(tmp_path / "nope"), require_mid=False).mid is None
    assert w[0].filename == __file__  # the warning names load_pair's caller
    with pytest.raises(TreeGraftError, match=r"does not exist.*\(or load the target alone: require_mid=False\)"):
        models.resolve_mid(str(tmp_path / "nope"), cpu, True)


def test_registry_has_the_papers_pairs():
    paper = {
        "qwen3-32b/0.6b", "qwen3-32b/1.7b", "qwen3-32b/4b", "qwen3-32b/8b", "qwen3-8b/0.6b",
        "llama3.3-70b/1b", "llama3.3-70b/3b", "llama3.3-70b/8b", "llama3.1-8b/1b",
        "llama3.1-8b/3b",
    }
    assert paper <= set(PAIRS) and "smollm2-pocket" in PAIRS
    hub = {n: tuple(models.MODELS[m] for m in PAIRS[n]) for n in paper}
    assert hub["qwen3-32b/1.7b"] == ("Qwen/Qwen3-32B", "Qwen/Qwen3-1.7B")
    assert hub["llama3.3-70b/8b"] == (
        "meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.1-8B-Instruct",
    )


def test_missing_folder_and_missing_mid(tmp_path, tiny_llama_dir):
    with pytest.raises(TreeGraftError, match="does not exist"):
        load_pair(target=tmp_path / "nope", mid=tiny_llama_dir)
    with pytest.raises(TreeGraftError, match="does not exist"):
        load_pair(target=tiny_llama_dir, mid=str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TreeGraftError, match="no config.json"):
        load_pair(target=tmp_path / "empty", mid=tiny_llama_dir)
    with pytest.raises(TreeGraftError, match="no mid drafter given"):
        load_pair(target=tiny_llama_dir)
    pair = load_pair(target=tiny_llama_dir, require_mid=False, dtype="float32")
    assert pair.mid is None and pair.target is not None


@pytest.fixture
def no_weights_load(monkeypatch):
    """transformers' `from_pretrained` fails loudly: a refusal must come before any weights load."""
    from transformers import AutoModelForCausalLM

    def fail(*a, **k):
        raise AssertionError("weights were loaded before the refusal")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fail)


def test_pocket_pair_without_drafter_says_how_to_make_it(tmp_path, monkeypatch, no_weights_load):
    monkeypatch.setattr(models, "POCKET_DRAFTER_DIR", tmp_path / "no-drafter")
    with pytest.raises(TreeGraftError, match="drafter .*missing.*treegraft-lab zoo distill"):
        load_pair("smollm2-pocket")


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """Point the hub client at a local endpoint (set with `hub(url)`), with an empty HF cache."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return lambda url: monkeypatch.setattr(constants, "ENDPOINT", url)


@pytest.mark.parametrize("kwargs", [
    {"name": "qwen3-32b/1.7b"},
    {"target": "Qwen/Qwen3-32B", "mid": "Qwen/Qwen3-0.6B"},
])  # fmt: skip
def test_an_unreachable_hub_is_refused_before_any_weights_load(hub, kwargs, no_weights_load):
    hub("http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(TreeGraftError, match="cannot reach the Hugging Face hub for 'Qwen/Qwen3-32B'"):
        load_pair(**kwargs)


def test_hub_that_never_answers_is_given_up_on(hub, monkeypatch):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)  # accepts connections, never answers
    try:
        hub(f"http://127.0.0.1:{server.getsockname()[1]}")
        probes, probe = [], models.probe_hub
        monkeypatch.setattr(models, "probe_hub", lambda repo: probes.append(repo) or probe(repo, 0.2))
        with pytest.raises(TreeGraftError, match="cannot reach the Hugging Face hub"):  # it gave up: no answer came
            load_pair(target="Qwen/Qwen3-8B", mid="Qwen/Qwen3-0.6B")
        assert probes == ["Qwen/Qwen3-8B"]  # the server never answered: the probe's own timeout ended the wait
    finally:
        server.close()


@pytest.mark.parametrize("status, message", [(404, "is not on the Hugging Face hub"),
                                             (401, "accept its licence")])  # fmt: skip
def test_hub_answers_not_found_or_gated(hub, status, message):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hub(f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(TreeGraftError, match=message):
            load_pair("llama3.1-8b/1b")
    finally:
        server.shutdown()


def test_hub_offline_mode_is_refused_before_any_weights_load(monkeypatch, tmp_path, no_weights_load):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    from huggingface_hub import utils

    asked = []
    monkeypatch.setattr(utils, "get_session", lambda *a, **k: asked.append(a) or pytest.fail("asked the hub"))
    with pytest.raises(TreeGraftError, match="pass the local folder"):
        load_pair(target="meta-llama/Llama-3.1-8B-Instruct", mid="meta-llama/Llama-3.2-1B-Instruct")
    assert asked == []  # offline: not even one request


def test_not_a_name_nor_a_hub_id():
    with pytest.raises(TreeGraftError, match="registered name .*qwen3-32b.*hub id"):
        load_pair(target="just-a-word", mid="other")
