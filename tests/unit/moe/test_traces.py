"""Routing parsers on files built to the engines' source formats (tests/data/moe/make_fixtures.py)."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from speclab.errors import SpeclabError
from speclab.moe.traces import (
    load_torch_file,
    read_sglang_dump,
    returned_routes,
    sglang_pass_table,
    sglang_routed_experts,
    sglang_token_routes,
    vllm_routed_experts,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "moe"
TRUTH = np.load(DATA / "routes_truth.npy")


def test_per_pass_dump_reads_without_torch_and_folds_replicas() -> None:
    dump = read_sglang_dump(DATA / "sglang_per_pass")
    assert dump["mode"] == "per_pass" and len(dump["records"]) == 6
    assert dump["records"][0]["global_physical_count"].shape == (4, 66)
    table = sglang_pass_table(dump, top_k=8)
    assert sorted(table["tokens"].unique()) == [4.0, 20.0]  # 4 sequences x 1 decode / x 5 verify tokens
    assert table["distinct_experts"].max() <= 64  # replicas 64/65 folded onto experts 3/17
    verify = table[table["tokens"] == 20]["distinct_experts"].mean()
    decode = table[table["tokens"] == 4]["distinct_experts"].mean()
    assert verify > 1.5 * decode


def test_per_token_dump_matches_per_pass_counts() -> None:
    per_token = read_sglang_dump(DATA / "sglang_per_token")
    per_pass = read_sglang_dump(DATA / "sglang_per_pass")
    assert per_token["mode"] == "per_token"
    routes = sglang_token_routes(per_token)
    assert routes[1].shape == (20, 4, 8) and routes[1].max() < 64
    table = sglang_pass_table(per_token, top_k=8)
    assert set(table["forward_mode"]) == {"DECODE", "TARGET_VERIFY"}
    from_routes = [len(np.unique(r[:, layer])) for r in routes for layer in range(4)]
    assert from_routes == sglang_pass_table(per_pass, top_k=8)["distinct_experts"].tolist()


def test_vllm_and_sglang_returned_routes_decode_to_the_same_truth() -> None:
    vllm = json.loads((DATA / "vllm_chat_response.json").read_text())
    sglang = json.loads((DATA / "sglang_generate_response.json").read_text())
    np.testing.assert_array_equal(returned_routes(vllm), TRUTH)
    np.testing.assert_array_equal(returned_routes(sglang, num_layers=4, top_k=8), TRUTH)
    # output rows only: completion_tokens - 1 (the last token is never forwarded)
    assert returned_routes(vllm, output_only=True).shape == (39, 4, 8)


def test_bad_routed_experts_say_what_to_fix() -> None:
    sglang = json.loads((DATA / "sglang_generate_response.json").read_text())
    with pytest.raises(SpeclabError, match="num_layers and top_k"):
        returned_routes(sglang)
    with pytest.raises(SpeclabError, match="not a multiple"):
        sglang_routed_experts(sglang["meta_info"]["routed_experts"], num_layers=5, top_k=8)
    with pytest.raises(SpeclabError, match="base64"):
        vllm_routed_experts("not base64 !!")
    with pytest.raises(SpeclabError, match="no routed_experts"):
        returned_routes({"choices": [{"message": {}}]})


def test_torch_files_with_foreign_objects_are_refused(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            import os

            return (os.getcwd, ())

    buffer = io.BytesIO()
    pickle.dump({"records": [Evil()]}, buffer, protocol=2)
    bad = tmp_path / "expert_distribution_recorder_1_0.pt"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
    with pytest.raises(SpeclabError, match="could not be read"):
        load_torch_file(bad)
    (tmp_path / "plain.pt").write_text("nope")
    with pytest.raises(SpeclabError, match="not a torch.save file"):
        load_torch_file(tmp_path / "plain.pt")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SpeclabError, match="No expert_distribution_recorder"):
        read_sglang_dump(empty)
