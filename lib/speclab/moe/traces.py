"""Real routing from a served MoE: SGLang's expert-distribution dumps and the routed experts
vLLM / SGLang return with a response. No torch needed: ``.pt`` dumps are read as the zip of
pickle + raw storages that ``torch.save`` writes, tensors becoming numpy arrays.

Sources (formats read from the engines' code, not guessed):

* **SGLang expert distribution recorder** (``python/sglang/srt/eplb/expert_distribution.py``):
  launch with ``--expert-distribution-recorder-mode per_pass|per_token`` (and
  ``SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR``), then ``POST /start_expert_distribution_record``,
  traffic, ``POST /stop_expert_distribution_record``, ``POST /dump_expert_distribution_record``.
  Each rank writes ``expert_distribution_recorder_<time>_<rank>.pt``:
  ``{"records": [...], "last_physical_to_logical_map": int[layers, physical_experts]}``; a
  record per forward pass holds ``forward_pass_id``, ``rank``, ``gatherer_key`` and
  ``global_physical_count`` int[layers, physical_experts] (tokens routed to each expert in
  that pass); ``per_token`` adds ``input_ids``, ``positions``, ``extend_seq_lens``,
  ``forward_mode`` (SGLang's ``ForwardMode`` enum value) and ``topk_ids_of_layer``
  int32[layers, tokens, 8] (-1 = unused slot). ``stat`` mode writes
  ``{"rank", "logical_count": int[steps, layers, experts], ...}`` instead.
* **vLLM ``--enable-return-routed-experts``** (0.32, ``entrypoints/openai/*/protocol.py`` and
  ``utils/serial_utils.numpy2base64``): each choice's ``routed_experts`` is base64 of the
  ``.npy`` bytes of an array [tokens - 1, layers, top_k] (uint8/uint16/int32) over the
  prompt (from ``routed_experts_prompt_start``) and the output.
* **SGLang ``--enable-return-routed-experts``** (request ``return_routed_experts: true``;
  PRs 12162, 17434): ``meta_info.routed_experts`` (``/generate``) or
  ``sgl_ext.routed_experts`` (OpenAI routes) is base64 of the raw int32 bytes of
  [prompt + output - 1 - routed_experts_start_len, layers, top_k], C order.

Returned routes cover committed (accepted) tokens only: draft positions that verification
also ran through the experts and then rejected never appear, so distinct experts counted
from them under-count what a verify pass loaded. SGLang's ``per_pass`` counts are the
verify passes themselves.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError

__all__ = [
    "SGLANG_FORWARD_MODES",
    "load_torch_file",
    "read_sglang_dump",
    "returned_routes",
    "sglang_pass_table",
    "sglang_routed_experts",
    "sglang_token_routes",
    "vllm_routed_experts",
]

# sglang/srt/model_executor/forward_batch_info.py ForwardMode (IntEnum, auto() from 1);
# the order has changed across releases: pass your version's mapping where it differs.
SGLANG_FORWARD_MODES = {1: "EXTEND", 2: "DECODE", 3: "MIXED", 4: "IDLE", 5: "TARGET_VERIFY", 6: "DRAFT_EXTEND"}

_STORAGE_DTYPES = {
    "DoubleStorage": np.float64, "FloatStorage": np.float32, "HalfStorage": np.float16,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16, "CharStorage": np.int8,
    "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


# --------------------------------------------------------------------------- torch.save without torch


class _Storage:
    def __init__(self, dtype: Any, data: bytes) -> None:
        self.array = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"))


def _rebuild_tensor(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                    *_: Any) -> np.ndarray:
    """A numpy view of the storage with torch's size/stride (in elements), copied out."""
    flat = storage.array
    if not size:
        return flat[offset].copy()
    item = flat.itemsize
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=tuple(size),
                                           strides=tuple(s * item for s in stride))
    return np.array(view)


class _TorchUnpickler(pickle.Unpickler):
    """Only the classes a tensor dump needs; anything else is refused (no code runs)."""

    def __init__(self, file: Any, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(file)
        self._archive, self._prefix = archive, prefix

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch._utils" and name == "_rebuild_parameter":
            return lambda data, *_: data
        raise pickle.UnpicklingError(f"unsupported object in a tensor dump: {module}.{name}")

    def persistent_load(self, pid: Any) -> _Storage:
        kind, dtype, key = pid[0], pid[1], pid[2]
        if kind != "storage":
            raise pickle.UnpicklingError(f"unsupported persistent id {kind!r}")
        return _Storage(dtype, self._archive.read(f"{self._prefix}data/{key}"))


def load_torch_file(path: str | Path) -> Any:
    """The object ``torch.save`` wrote (zip format, torch >= 1.6), tensors as numpy arrays."""
    file = Path(path)
    try:
        archive = zipfile.ZipFile(file)
    except (FileNotFoundError, IsADirectoryError):
        raise SpeclabError(f"No dump at {file}; check the path.") from None
    except zipfile.BadZipFile:
        raise SpeclabError(f"{file} is not a torch.save file (zip format); dump it again with SGLang.") from None
    with archive:
        names = [n for n in archive.namelist() if n.endswith("data.pkl")]
        if not names:
            raise SpeclabError(f"{file} holds no data.pkl; it is not a torch.save file.")
        prefix = names[0][: -len("data.pkl")]
        try:
            return _TorchUnpickler(io.BytesIO(archive.read(names[0])), archive, prefix).load()
        except (pickle.UnpicklingError, KeyError, ValueError) as exc:
            raise SpeclabError(f"{file} could not be read as a tensor dump ({exc}).") from None


# --------------------------------------------------------------------------- SGLang recorder dumps


def read_sglang_dump(path: str | Path) -> dict[str, Any]:
    """One dump file (or every ``expert_distribution_recorder_*.pt`` in a folder), records merged.

    Returns ``{"mode": "per_token"|"per_pass"|"stat", "records": [...],
    "physical_to_logical": array or None, "logical_count": array or None}``.
    """
    source = Path(path)
    files = sorted(source.glob("expert_distribution_recorder_*.pt")) if source.is_dir() else [source]
    if not files:
        raise SpeclabError(f"No expert_distribution_recorder_*.pt files in {source}; dump the record first.")
    records: list[dict[str, Any]] = []
    mapping = None
    counts = []
    for file in files:
        data = load_torch_file(file)
        if not isinstance(data, dict):
            raise SpeclabError(f"{file} is not an SGLang expert-distribution dump (no dict at the top).")
        if "records" in data:
            records.extend(data["records"])
            mapping = data.get("last_physical_to_logical_map", mapping)
        elif "logical_count" in data:
            counts.append(np.asarray(data["logical_count"]))
        else:
            raise SpeclabError(f"{file} has neither 'records' nor 'logical_count'; is it an SGLang recorder dump?")
    if counts:
        return {"mode": "stat", "records": [], "physical_to_logical": None,
                "logical_count": np.concatenate([c.reshape(-1, *c.shape[-2:]) for c in counts])}
    mode = "per_token" if any("topk_ids_of_layer" in r for r in records) else "per_pass"
    return {"mode": mode, "records": records, "physical_to_logical": None if mapping is None else np.asarray(mapping),
            "logical_count": None}


def _logical_counts(count: np.ndarray, mapping: np.ndarray | None) -> np.ndarray:
    """Physical-expert counts [layers, physical] folded onto logical experts (EPLB replicas)."""
    count = np.asarray(count)
    if mapping is None:
        return count
    layers = count.shape[0]
    logical = int(mapping.max()) + 1
    out = np.zeros((layers, logical), dtype=np.int64)
    for layer in range(layers):
        np.add.at(out[layer], mapping[layer], count[layer])
    return out


def sglang_pass_table(dump: dict[str, Any], top_k: int, modes: dict[int, str] | None = None) -> pd.DataFrame:
    """One row per forward pass x layer: tokens in the pass, distinct experts touched.

    ``tokens`` = routed slots / ``top_k``; for ``per_token`` dumps the pass's forward mode
    is named (``TARGET_VERIFY`` passes are what verification loads)."""
    names = modes or SGLANG_FORWARD_MODES
    rows = []
    for rec in dump["records"]:
        counts = _logical_counts(rec["global_physical_count"], dump.get("physical_to_logical"))
        mode = rec.get("forward_mode")
        for layer in range(counts.shape[0]):
            slots = int(counts[layer].sum())
            if slots == 0:
                continue
            rows.append({
                "forward_pass_id": int(rec.get("forward_pass_id", -1)), "rank": int(rec.get("rank", 0)),
                "forward_mode": names.get(int(mode), str(mode)) if mode is not None else None,
                "layer": layer, "tokens": slots / top_k, "distinct_experts": int((counts[layer] > 0).sum()),
            })
    return pd.DataFrame(rows)


def sglang_token_routes(dump: dict[str, Any]) -> list[np.ndarray]:
    """``per_token`` dumps: each pass's routes as int[tokens, layers, top_k] (unused slots = -1)."""
    if dump["mode"] != "per_token":
        raise SpeclabError("Per-token routes need a dump recorded with --expert-distribution-recorder-mode per_token.")
    out = []
    for rec in dump["records"]:
        ids = np.asarray(rec["topk_ids_of_layer"])  # [layers, tokens, k]
        mapping = dump.get("physical_to_logical")
        if mapping is not None:
            safe = np.where(ids >= 0, ids, 0)
            logical = np.take_along_axis(np.asarray(mapping), safe.reshape(ids.shape[0], -1), axis=1)
            ids = np.where(ids >= 0, logical.reshape(ids.shape), -1)
        out.append(np.transpose(ids, (1, 0, 2)))
    return out


# --------------------------------------------------------------------------- returned routed experts


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SpeclabError("routed_experts is not valid base64; pass the field exactly as the server returned it.") from None


def vllm_routed_experts(encoded: str) -> np.ndarray:
    """vLLM's ``routed_experts``: base64 ``.npy`` -> int array [tokens - 1, layers, top_k]."""
    try:
        array = np.load(io.BytesIO(_b64(encoded)), allow_pickle=False)
    except ValueError:
        raise SpeclabError("vLLM routed_experts did not decode to a .npy array; is this an SGLang response?") from None
    if array.ndim != 3:
        raise SpeclabError(f"vLLM routed_experts should be [tokens, layers, top_k]; got shape {array.shape}.")
    return array.astype(np.int64)


def sglang_routed_experts(encoded: str, num_layers: int, top_k: int, dtype: str = "int32") -> np.ndarray:
    """SGLang's ``routed_experts``: base64 raw C-order bytes -> int array [tokens, layers, top_k]."""
    raw = np.frombuffer(_b64(encoded), dtype=np.dtype(dtype).newbyteorder("<"))
    per_token = num_layers * top_k
    if per_token <= 0 or raw.size % per_token:
        raise SpeclabError(f"SGLang routed_experts holds {raw.size} values, not a multiple of layers x top_k "
                           f"= {per_token}; check num_layers and top_k.")
    return raw.reshape(-1, num_layers, top_k).astype(np.int64)


def returned_routes(response: dict[str, Any], *, num_layers: int | None = None, top_k: int | None = None,
                    choice: int = 0, output_only: bool = False) -> np.ndarray:
    """Routes from one response body of either engine, int[tokens, layers, top_k].

    vLLM: ``choices[i].routed_experts``. SGLang: ``meta_info.routed_experts`` (``/generate``)
    or ``sgl_ext.routed_experts`` (OpenAI routes), which need ``num_layers`` and ``top_k``.
    ``output_only`` keeps the rows of generated tokens (the last ``completion_tokens - 1``
    rows: the final token is never forwarded), where ``usage``/``meta_info`` say how many.
    """
    choices = response.get("choices") or []
    if choices and choices[choice].get("routed_experts"):
        routes = vllm_routed_experts(choices[choice]["routed_experts"])
        completion = (response.get("usage") or {}).get("completion_tokens")
    else:
        holder = response.get("meta_info") or response.get("sgl_ext") or \
            (choices[choice].get("sgl_ext") if choices else None) or {}
        encoded = holder.get("routed_experts")
        if not encoded:
            raise SpeclabError("The response carries no routed_experts; start the server with "
                               "--enable-return-routed-experts and ask for them (SGLang: return_routed_experts).")
        if not (num_layers and top_k):
            raise SpeclabError("SGLang routed_experts need num_layers and top_k (the model's MoE layers and experts per token).")
        routes = sglang_routed_experts(encoded, num_layers, top_k)
        completion = holder.get("completion_tokens") or (response.get("usage") or {}).get("completion_tokens")
    if output_only and completion:
        routes = routes[-max(int(completion) - 1, 0):] if int(completion) > 1 else routes[:0]
    return routes
