"""The registry's upload checks, as pure functions."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from services.registry.header import read_safetensors_header
from services.registry.names import RegistryError, check_alias, check_name, parse_ref
from services.registry.validate import check_upload, parse_adapter_config
from shared.runtime.config import PoolConfig, Settings, load_settings
from tests.helpers.adapters import (
    adapter_config,
    adapter_tensors,
    make_adapter,
    pickle_bytes,
    safetensors_with_header,
    tensor_name,
    write_base_model,
)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    write_base_model(tmp_path / "models")
    return load_settings(models_dir=tmp_path / "models", adapter_max_bytes=64 * 1024)


def run(settings: Settings, model: bytes, config: bytes, filename: str = "adapter_model.safetensors", **kw):
    return check_upload(settings, io.BytesIO(model), len(model), filename, config, **kw)


def refused(settings: Settings, model: bytes, config: bytes, **kw) -> RegistryError:
    with pytest.raises(RegistryError) as ei:
        run(settings, model, config, **kw)
    return ei.value


def test_good_adapter(settings: Settings) -> None:
    model, config = make_adapter()
    checked = run(settings, model, config)
    assert checked.config.rank == 8 and checked.config.alpha == 16.0
    assert checked.config.target_modules == ["q_proj", "v_proj"]
    assert checked.base_model == "sy-tiny" and checked.tensors == 8 and checked.size_bytes == len(model)


def test_all_modules_and_fp16(settings: Settings) -> None:
    mods = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    t = {k: v.astype(np.float16) for k, v in adapter_tensors(4, mods, layers=1).items()}
    s = settings.model_copy(update={"adapter_max_bytes": 1 << 20})
    assert run(s, save(t), adapter_config(4, mods)).tensors == 14


def test_peft_saved_adapter(settings: Settings, tmp_path: Path) -> None:
    """An adapter written by peft itself passes (the format the checks assume is peft's)."""
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=64,
    )
    model = peft.get_peft_model(
        transformers.LlamaForCausalLM(cfg),
        peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]),
    )
    model.save_pretrained(tmp_path / "out")
    st = (tmp_path / "out" / "adapter_model.safetensors").read_bytes()
    conf = (tmp_path / "out" / "adapter_config.json").read_bytes()
    checked = run(settings, st, conf, base_model_override="sy-tiny")  # peft recorded no base path
    assert checked.config.rank == 8 and checked.tensors == 8


@pytest.mark.parametrize("filename", ["adapter.bin", "model.pt", "w.pth", "x.pkl", "m.ckpt"])
def test_pickle_filenames(settings: Settings, filename: str) -> None:
    model, config = make_adapter()
    e = refused(settings, model, config, filename=filename)
    assert e.status == 400 and "only safetensors" in e.message


def test_pickle_content(settings: Settings) -> None:
    _, config = make_adapter()
    e = refused(settings, pickle_bytes(), config)
    assert e.status == 400 and "pickle" in e.message


def test_zip_content(settings: Settings) -> None:
    _, config = make_adapter()
    e = refused(settings, b"PK\x03\x04" + b"\0" * 100, config)
    assert e.status == 400 and "zip" in e.message


T = tensor_name(0, "q_proj", "A")


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (b"\x01\x02", "shorter than"),
        ((10**9).to_bytes(8, "little") + b"{}", "header length"),
        ((100).to_bytes(8, "little") + b"{}", "past the end"),
        (safetensors_with_header(b"not json at all"), "not JSON"),
        (safetensors_with_header(b"[1, 2]"), "not a JSON object"),
        (safetensors_with_header({}), "no tensors"),
        (
            safetensors_with_header({T: {"dtype": "X9", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
            "unknown dtype",
        ),
        (
            safetensors_with_header({T: {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4),
            "needs 8",
        ),
        (
            safetensors_with_header({T: {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 4),
            "run past",
        ),
        (
            safetensors_with_header({T: {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
            "not contiguous",
        ),
        (
            safetensors_with_header({T: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8),
            "trailing bytes",
        ),
        (
            safetensors_with_header({T: {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4),
            "non-negative",
        ),
        (
            safetensors_with_header(
                {T: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}, b"\0" * 4
            ),
            "exactly",
        ),
    ],
)
def test_corrupt_headers(settings: Settings, blob: bytes, why: str) -> None:
    _, config = make_adapter()
    e = refused(settings, blob, config)
    assert e.status == 400 and e.message.startswith("corrupt safetensors header:") and why in e.message, (
        e.message
    )


def test_overlapping_offsets() -> None:
    h = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    }
    blob = safetensors_with_header(h, b"\0" * 12)
    with pytest.raises(RegistryError, match="not contiguous"):
        read_safetensors_header(io.BytesIO(blob), len(blob))


def test_shape_mismatch(settings: Settings) -> None:
    t = adapter_tensors()
    t[tensor_name(1, "v_proj", "B")] = np.zeros((96, 8), dtype=np.float32)
    e = refused(settings, save(t), adapter_config())
    assert e.status == 422
    assert e.message == f"shape mismatch: {tensor_name(1, 'v_proj', 'B')} is [96, 8], expected [128, 8]"


def test_rank_in_tensors_differs_from_config(settings: Settings) -> None:
    e = refused(settings, save(adapter_tensors(r=4)), adapter_config(r=8))
    assert "shape mismatch" in e.message and "expected [8, 128]" in e.message


def test_layer_out_of_range(settings: Settings) -> None:
    t = adapter_tensors()
    t[tensor_name(2, "q_proj", "A")] = np.zeros((8, 128), dtype=np.float32)
    t[tensor_name(2, "q_proj", "B")] = np.zeros((128, 8), dtype=np.float32)
    assert "layer 2 out of range" in refused(settings, save(t), adapter_config()).message


def test_untargeted_module_and_unknown_tensor(settings: Settings) -> None:
    t = adapter_tensors(modules=("q_proj", "k_proj"))
    assert "not in target_modules" in refused(settings, save(t), adapter_config()).message
    t = adapter_tensors()
    t["base_model.model.lm_head.weight"] = np.zeros((4,), dtype=np.float32)
    assert "unexpected tensor" in refused(settings, save(t), adapter_config()).message


def test_missing_half(settings: Settings) -> None:
    t = adapter_tensors()
    del t[tensor_name(0, "q_proj", "B")]
    assert "lora_B is missing" in refused(settings, save(t), adapter_config()).message


def test_rank_too_high(settings: Settings) -> None:
    model, config = make_adapter(r=16)
    s = settings.model_copy(update={"adapter_max_bytes": 1 << 20})
    e = refused(s, model, config)
    assert e.status == 422 and "rank r=16 exceeds the largest max_lora_rank 8" in e.message


def test_rank_bound_is_largest_pool(settings: Settings) -> None:
    pools = [
        PoolConfig(name="a", engine="vllm", models=["sy-tiny"], max_lora_rank=8),
        PoolConfig(name="b", engine="vllm", models=["sy-tiny"], max_lora_rank=16),
    ]
    s = settings.model_copy(update={"adapter_max_bytes": 1 << 20, "pools": pools})
    assert run(s, *make_adapter(r=16)).config.rank == 16
    no_lora = [PoolConfig(name="a", engine="vllm", models=["sy-tiny"], max_lora_rank=0)]
    e = refused(settings.model_copy(update={"pools": no_lora}), *make_adapter())
    assert "not served" in e.message


def test_oversize(settings: Settings) -> None:
    model, config = make_adapter(modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"))
    assert len(model) > settings.adapter_max_bytes
    e = refused(settings, model, config)
    assert e.status == 413 and "over the limit" in e.message


def test_wrong_base_model(settings: Settings, tmp_path: Path) -> None:
    model, _ = make_adapter()
    e = refused(settings, model, adapter_config(base="meta-llama/Llama-3-8B"))
    assert e.status == 422 and "not served" in e.message and "Llama-3-8B" in e.message
    # A served model whose shapes differ: the shapes catch it.
    (tmp_path / "models" / "sy-tiny" / "config.json").write_text(
        json.dumps(
            {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
        )
    )
    assert "shape mismatch" in refused(settings, model, adapter_config()).message


@pytest.mark.parametrize(
    ("cfg", "why"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (adapter_config(peft_type="IA3"), "peft_type"),
        (adapter_config(r=0), "r must be"),
        (adapter_config(r="8"), "r must be"),
        (adapter_config(lora_alpha=None), "lora_alpha"),
        (adapter_config(target_modules=["embed_tokens"]), "not LoRA-servable"),
        (adapter_config(target_modules=[]), "non-empty"),
        (adapter_config(base_model_name_or_path=3), "base_model_name_or_path"),
        (adapter_config(use_dora=True), "use_dora"),
    ],
)
def test_bad_config(cfg: bytes, why: str) -> None:
    with pytest.raises(RegistryError, match=why) as ei:
        parse_adapter_config(cfg)
    assert ei.value.status == 422


def test_target_modules_regex() -> None:
    cfg = parse_adapter_config(adapter_config(target_modules=r".*\.(q_proj|v_proj)"))
    assert cfg.target_modules == ["q_proj", "v_proj"]
    assert parse_adapter_config(adapter_config(target_modules="q_proj")).target_modules == ["q_proj"]


@pytest.mark.parametrize(
    "name", ["", "A", "../x", "a/b", "a@b", "a..b", ".hidden", "-x", "a\x00", "a\n", "x" * 65, "ünï"]
)
def test_bad_names(name: str) -> None:
    with pytest.raises(RegistryError) as ei:
        check_name(name)
    assert ei.value.status == 400


def test_good_names_aliases_refs() -> None:
    for n in ("a", "my-adapter_1.2", "0abc", "x" * 64):
        assert check_name(n) == n
    assert check_alias("prod") == "prod"
    with pytest.raises(RegistryError):
        check_alias("1")
    assert parse_ref("ad") == ("ad", None, "latest")
    assert parse_ref("ad@3") == ("ad", 3, None)
    assert parse_ref("ad@prod") == ("ad", None, "prod")
    for bad in ("ad@", "ad@0", "ad@../x", "../x@1", "ad@a@b"):
        with pytest.raises(RegistryError) as ei:
            parse_ref(bad)
        assert ei.value.status == 400
