"""Checks of an uploaded LoRA adapter, as pure functions (no HTTP, no storage).

Nothing uploaded is ever executed: the safetensors header is parsed here by hand (no pickle,
no torch.load), and every tensor is checked against the base model's shapes so a worker never
meets an adapter its engine would refuse or, worse, load wrongly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from shared.runtime.config import Settings

from .header import TensorInfo, check_model_filename, json_object, read_safetensors_header
from .names import refuse

MAX_CONFIG_BYTES = 1024 * 1024
FLOAT_DTYPES = {"F16", "BF16", "F32"}

ATTN_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
KNOWN_MODULES = ATTN_MODULES + MLP_MODULES
TENSOR_RE = re.compile(
    r"^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\."
    r"(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.lora_(A|B)\.weight$"
)


# --------------------------------------------------------------------------- adapter config


@dataclass(frozen=True, slots=True)
class AdapterConfig:
    rank: int
    alpha: float
    target_modules: list[str]
    base_model: str


def _bad_config(why: str) -> None:
    refuse(f"invalid adapter_config.json: {why}", "invalid_adapter_config", "adapter_config")


def _modules_of(target: Any) -> list[str]:
    if isinstance(target, list):
        if not target or not all(isinstance(m, str) for m in target):
            _bad_config("target_modules must be a non-empty list of module names")
        unknown = sorted(set(target) - set(KNOWN_MODULES))
        if unknown:
            _bad_config(f"target_modules {unknown} are not LoRA-servable (known: {list(KNOWN_MODULES)})")
        return sorted(set(target), key=KNOWN_MODULES.index)
    if isinstance(target, str):
        if target in KNOWN_MODULES:
            return [target]
        try:
            rx = re.compile(target)
        except re.error:
            _bad_config(f"target_modules {target!r} is neither a module name nor a regex")
        found = [
            m
            for m in KNOWN_MODULES
            if rx.fullmatch(f"model.layers.0.{'self_attn' if m in ATTN_MODULES else 'mlp'}.{m}")
        ]
        if not found:
            _bad_config(f"target_modules regex {target!r} matches none of {list(KNOWN_MODULES)}")
        return found
    _bad_config("target_modules must be a list of module names or a regex string")
    raise AssertionError("unreachable")


def parse_adapter_config(raw: bytes) -> AdapterConfig:
    if len(raw) > MAX_CONFIG_BYTES:
        refuse(
            f"adapter_config.json exceeds {MAX_CONFIG_BYTES} bytes",
            "too_large",
            "adapter_config",
            413,
        )
    cfg = json_object(raw, _bad_config)
    if cfg.get("peft_type") != "LORA":
        _bad_config(f"peft_type must be 'LORA', got {cfg.get('peft_type')!r}")
    r = cfg.get("r")
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        _bad_config(f"r must be an integer >= 1, got {r!r}")
    alpha = cfg.get("lora_alpha")
    if not isinstance(alpha, int | float) or isinstance(alpha, bool) or alpha <= 0:
        _bad_config(f"lora_alpha must be a positive number, got {alpha!r}")
    if cfg.get("use_dora"):
        _bad_config("use_dora adapters are not served")
    for key in ("rank_pattern", "alpha_pattern"):
        if cfg.get(key):
            _bad_config(f"{key} is not supported (one rank and alpha for all modules)")
    base = cfg.get("base_model_name_or_path") or ""
    if not isinstance(base, str):
        _bad_config(f"base_model_name_or_path must be a string, got {base!r}")
    return AdapterConfig(r, float(alpha), _modules_of(cfg.get("target_modules")), base)


# --------------------------------------------------------------------------- base model


@dataclass(frozen=True, slots=True)
class BaseShapes:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int

    def features(self, module: str) -> tuple[int, int]:
        """(in_features, out_features) of a Llama linear layer."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {
            "q_proj": (self.hidden, q),
            "k_proj": (self.hidden, kv),
            "v_proj": (self.hidden, kv),
            "o_proj": (q, self.hidden),
            "gate_proj": (self.hidden, self.intermediate),
            "up_proj": (self.hidden, self.intermediate),
            "down_proj": (self.intermediate, self.hidden),
        }[module]


def served_models(settings: Settings) -> set[str]:
    return {m for p in settings.pools for m in p.models}


def max_rank_for(settings: Settings, base_model: str) -> int:
    return max((p.max_lora_rank for p in settings.pools if base_model in p.models), default=0)


def load_base_shapes(config_path: Path) -> BaseShapes:
    try:
        cfg = json.loads(config_path.read_text())
        hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        return BaseShapes(
            hidden=hidden,
            intermediate=int(cfg["intermediate_size"]),
            layers=int(cfg["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
        )
    except FileNotFoundError:
        refuse(
            f"base model config {config_path} not found on the registry",
            "base_model_unavailable",
            "base_model",
            422,
        )
    except (KeyError, TypeError, ValueError) as exc:
        refuse(f"base model config {config_path} unreadable: {exc!r}", "base_model_unavailable", "base_model")
    raise AssertionError("unreachable")


def check_base_model(settings: Settings, base_model: str) -> tuple[BaseShapes, int]:
    """The base model must be served, with LoRA enabled; returns its shapes and the rank bound."""
    served = served_models(settings)
    if base_model not in served:
        refuse(
            f"base model {base_model!r} is not served here (served: {sorted(served)})",
            "wrong_base_model",
            "base_model",
        )
    limit = max_rank_for(settings, base_model)
    if limit == 0:
        refuse(
            f"LoRA adapters are not served for base model {base_model!r} (max_lora_rank 0)",
            "lora_not_served",
            "base_model",
        )
    return load_base_shapes(settings.model_dir / base_model / "config.json"), limit


def check_tensors(tensors: dict[str, TensorInfo], cfg: AdapterConfig, base: BaseShapes) -> None:
    """Peft tensor names, layers in range, modules targeted, [r, in] / [out, r] shapes."""
    seen: dict[tuple[int, str], set[str]] = {}
    for name, t in sorted(tensors.items()):
        m = TENSOR_RE.fullmatch(name)
        if m is None:
            refuse(
                f"unexpected tensor {name!r}: expected base_model.model.model.layers.<i>."
                "<self_attn|mlp>.<module>.lora_<A|B>.weight",
                "unexpected_tensor",
                "adapter_model",
            )
        layer, parent, module, ab = int(m[1]), m[2], m[3], m[4]
        if (parent == "self_attn") != (module in ATTN_MODULES):
            refuse(f"unexpected tensor {name!r}: {module} is not under {parent}", "unexpected_tensor")
        if layer >= base.layers:
            refuse(
                f"tensor {name!r}: layer {layer} out of range (base model has {base.layers} layers)",
                "shape_mismatch",
                "adapter_model",
            )
        if module not in cfg.target_modules:
            refuse(
                f"tensor {name!r}: module {module} is not in target_modules {cfg.target_modules}",
                "unexpected_tensor",
                "adapter_model",
            )
        if t.dtype not in FLOAT_DTYPES:
            refuse(f"tensor {name!r}: dtype {t.dtype} (expected F32, F16 or BF16)", "bad_dtype")
        fin, fout = base.features(module)
        want = (cfg.rank, fin) if ab == "A" else (fout, cfg.rank)
        if t.shape != want:
            refuse(
                f"shape mismatch: {name} is {list(t.shape)}, expected {list(want)}",
                "shape_mismatch",
                "adapter_model",
            )
        seen.setdefault((layer, module), set()).add(ab)
    for (layer, module), parts in sorted(seen.items()):
        if parts != {"A", "B"}:
            missing = ({"A", "B"} - parts).pop()
            refuse(
                f"layer {layer} {module}: lora_{missing} is missing", "incomplete_adapter", "adapter_model"
            )


@dataclass(frozen=True, slots=True)
class CheckedAdapter:
    """What the catalog needs of an upload that passed every check."""

    config: AdapterConfig
    base_model: str
    size_bytes: int
    tensors: int


def check_upload(
    settings: Settings,
    model: BinaryIO,
    model_size: int,
    model_filename: str | None,
    config_raw: bytes,
    base_model_override: str | None = None,
) -> CheckedAdapter:
    """Every check, cheapest first; raises RegistryError with the first reason found.

    `base_model_override` (the upload's `base_model` field) replaces the config's
    base_model_name_or_path, e.g. when the adapter was trained from a local path of that model;
    shapes are checked against the chosen base either way.
    """
    check_model_filename(model_filename)
    if model_size > settings.adapter_max_bytes:
        refuse(
            f"adapter_model is {model_size} bytes, over the limit of {settings.adapter_max_bytes}",
            "too_large",
            "adapter_model",
            413,
        )
    tensors = read_safetensors_header(model, model_size)
    cfg = parse_adapter_config(config_raw)
    base_model = base_model_override or cfg.base_model
    if not base_model:
        _bad_config("base_model_name_or_path is missing (or send the base_model field)")
    shapes, limit = check_base_model(settings, base_model)
    if cfg.rank > limit:
        refuse(
            f"rank r={cfg.rank} exceeds the largest max_lora_rank {limit} of the pools serving {base_model!r}",
            "rank_too_high",
            "adapter_config",
        )
    check_tensors(tensors, cfg, shapes)
    return CheckedAdapter(cfg, base_model, model_size, len(tensors))
