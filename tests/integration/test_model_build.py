from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from shared.devstack.models import build, tasks, tokenizer  # noqa: E402

# A smaller recipe than sy-tiny, same files and format: the test is about the build, not accuracy.
TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 128,
    "max_position_embeddings": 128,
}
FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "build.json",
}


def _build(models_dir: Path, **kw: object) -> Path:
    return build.build_model(
        "t-tiny", models_dir, max_steps=30, progress=False, arch=TINY, eval_per_task=2, **kw
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("models"))


def test_files_and_manifest(built: Path) -> None:
    assert built.name == "t-tiny"
    assert FILES <= {p.name for p in built.iterdir()}
    leftovers = [p.name for p in built.parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    assert leftovers == []
    manifest = json.loads((built / "build.json").read_text())
    assert manifest["name"] == "t-tiny"
    assert manifest["recipe_hash"] == build.recipe_hash(manifest["recipe"])
    assert manifest["recipe"]["arch"]["hidden_size"] == 64
    assert manifest["steps"] == 30 and manifest["seed"] == 0
    assert manifest["train_seconds"] > 0 and manifest["final_loss"] > 0
    assert set(manifest["eval_accuracy"]) == set(tasks.TASKS)
    assert all(0.0 <= a <= 1.0 for a in manifest["eval_accuracy"].values())
    # Both formats are trained and evaluated, and the figures are beside the weights too.
    assert set(manifest["eval_accuracy_completion"]) == set(tasks.TASKS)
    config = json.loads((built / "config.json").read_text())
    assert config["sy_eval_accuracy"] == {
        "chat": manifest["eval_accuracy"],
        "completion": manifest["eval_accuracy_completion"],
    }
    assert set(manifest["files"]) == FILES - {"build.json"}
    for name, meta in manifest["files"].items():
        assert (built / name).stat().st_size == meta["bytes"]
    # Readable by serving processes running as another user.
    assert all(p.stat().st_mode & 0o444 == 0o444 for p in [built, *built.iterdir()])
    assert build.is_complete(built, manifest["recipe_hash"])
    assert not build.is_complete(built, "0" * 16)


def test_transformers_loads_and_generates(built: Path) -> None:
    tok = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    config = json.loads((built / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["tie_word_embeddings"] is False
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (
        tok.bos_token_id,
        tok.eos_token_id,
        tok.pad_token_id,
    )
    assert model.config.vocab_size == len(tok)

    messages = [{"role": "user", "content": "What is 2+3?"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|bos|><|user|>What is 2+3?<|end|><|assistant|>"
    assert text == tokenizer.render(messages, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids["input_ids"][0].tolist())[:3] == ["<|bos|>", "<|user|>", "W"]

    out = model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    new = out[0, ids["input_ids"].shape[1] :]
    assert 1 <= len(new) <= 4
    assert isinstance(tok.decode(new, skip_special_tokens=True), str)


def test_second_build_is_a_cache_hit(built: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in built.iterdir()}
    t0 = time.monotonic()
    again = _build(built.parent)
    assert again == built
    assert time.monotonic() - t0 < 5
    assert {p.name: p.stat().st_mtime_ns for p in built.iterdir()} == before


def test_changed_recipe_or_damaged_build_rebuilds(built: Path, tmp_path: Path) -> None:
    copy = tmp_path / "t-tiny"
    shutil.copytree(built, copy)
    digest = json.loads((copy / "build.json").read_text())["recipe_hash"]
    assert build.is_complete(copy, digest)
    (copy / "model.safetensors").write_bytes(b"truncated")
    assert not build.is_complete(copy, digest)
    other = build.make_recipe(None, 31, 0, TINY, None, 2)
    assert build.recipe_hash(other) != digest


def test_interrupted_build_leaves_nothing_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "train", boom)
    with pytest.raises(KeyboardInterrupt):
        _build(tmp_path)
    assert not (tmp_path / "t-tiny").exists()
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_unknown_override_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown arch"):
        build.build_model("x", tmp_path, arch={"hidden": 1})
    with pytest.raises(ValueError, match="budget"):
        build.build_model("x", tmp_path, minutes=None, max_steps=None)
