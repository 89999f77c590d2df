"""`switchyard adapters build|upload`: the built folder is PEFT's layout the registry accepts, and the
upload sends the registry's multipart form (shared/devstack/adapters_cli.py)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import httpx
import pytest

from services.registry.validate import check_upload
from shared.devstack import adapters_cli
from shared.runtime.config import load_settings
from tests.helpers.adapters import write_base_model


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="switchyard")
    adapters_cli.add_parser(parser.add_subparsers(dest="cmd", required=True))
    return parser.parse_args(argv)


def test_arguments() -> None:
    b = parse("adapters", "build", "math", "--base", "sy-tiny", "--rank", "4", "--out", "/tmp/x")
    assert (b.func, b.name, b.base, b.rank, b.out, b.targets) == (
        adapters_cli.cmd_build,
        "math",
        "sy-tiny",
        4,
        "/tmp/x",
        "q_proj,v_proj",
    )
    assert parse("adapters", "build", "math").rank == 8 and parse("adapters", "build", "m").seed is None
    u = parse("adapters", "upload", "d", "--name", "math", "--alias", "prod", "--alias", "canary")
    assert (u.func, u.dir, u.name, u.alias, u.registry, u.visibility) == (
        adapters_cli.cmd_upload,
        "d",
        "math",
        ["prod", "canary"],
        None,
        None,
    )
    with pytest.raises(SystemExit):
        parse("adapters", "upload", "d")  # --name is required


def test_build_makes_an_adapter_the_registry_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("peft")
    models = tmp_path / "models"
    write_base_model(models)  # config.json only: a tiny fake sy-tiny
    monkeypatch.setenv("SY_VAR_DIR", str(tmp_path))
    args = parse("adapters", "build", "math", "--rank", "4", "--models-dir", str(models))
    assert args.func(args) == 0
    built = adapters_cli.Built.model_validate_json(capsys.readouterr().out)
    out = tmp_path / "adapters" / "math"
    assert built.path == str(out) and built.rank == 4 and set(built.files) == set(adapters_cli.ADAPTER_FILES)
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["base_model_name_or_path"] == "sy-tiny"
    model = (out / "adapter_model.safetensors").read_bytes()
    settings = load_settings(models_dir=models)
    checked = check_upload(
        settings, io.BytesIO(model), len(model), "adapter_model.safetensors", json.dumps(config).encode()
    )
    assert checked.base_model == "sy-tiny" and checked.config.target_modules == ["q_proj", "v_proj"]


def test_build_without_the_base_model_says_how_to_make_it(tmp_path: Path) -> None:
    args = parse("adapters", "build", "math", "--models-dir", str(tmp_path))
    assert args.func(args) == 2


def test_upload_posts_the_registrys_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "adapter_model.safetensors").write_bytes(b"weights")
    sent: dict[str, object] = {}

    def post(url: str, data: dict[str, str], files: dict, headers: dict[str, str], timeout: float):  # type: ignore[no-untyped-def]
        sent.update(
            url=url, data=data, files={k: (v[0], v[1].read()) for k, v in files.items()}, headers=headers
        )
        return httpx.Response(201, json={"name": "math", "version": 1})

    monkeypatch.setattr(adapters_cli.httpx, "post", post)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = parse(
        "adapters", "upload", str(tmp_path), "--name", "math", "--alias", "prod", "--registry", "http://r:1/"
    )
    assert args.func(args) == 0
    assert sent["url"] == "http://r:1/v1/adapters"
    assert sent["data"] == {"name": "math", "aliases": "prod"}
    assert sent["files"] == {
        "adapter_config": ("adapter_config.json", b"{}"),
        "adapter_model": ("adapter_model.safetensors", b"weights"),
    }
    assert sent["headers"] == {"Authorization": "Bearer sk-switchyard-local"}
