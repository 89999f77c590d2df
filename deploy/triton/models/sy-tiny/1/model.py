"""Triton python model: streaming text generation with sy-tiny on CPU (decoupled).

execute() turns each request into a GenRequest for the continuous-batching engine and returns
at once; the engine's thread sends one response per decode step through the request's
response sender, the last one flagged final. Inputs: INPUT_IDS (prompt token ids, preferred:
the caller renders the chat template) or PROMPT (text), plus optional sampling inputs; for a
VLM (sy-vlm: its weights folder has vision.safetensors) IMAGES and IMAGE_OFFSETS, whose patch
embeddings replace the placeholder tokens at those prompt positions (vision_tower.py); for an
audio model (audio.safetensors) AUDIO (the clips' 16 kHz float32 samples back to back),
AUDIO_SAMPLES (each clip's length) and AUDIO_OFFSETS (audio_tower.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llama_engine import Engine, GenRequest, GenStep  # noqa: E402

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _scalar(request: object, name: str, default: object) -> object:
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    arr = t.as_numpy().reshape(-1)
    return arr[0].item() if arr.size else default


def _strings(request: object, name: str) -> list[str]:
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return []
    return [x.decode() if isinstance(x, bytes) else str(x) for x in t.as_numpy().reshape(-1)]


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        model_dir = params.get("model_dir") or ""
        if not model_dir:
            base = os.environ.get("SY_MODELS_DIR") or os.path.join(
                os.environ.get("SY_VAR_DIR", "var"), "models"
            )
            model_dir = os.path.join(base, params.get("weights", "sy-tiny"))
        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise pb_utils.TritonModelException(
                f"{args['model_name']}: no model at {path} (set parameter model_dir or SY_MODELS_DIR)"
            )
        threads = int(params.get("torch_threads") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        self.engine = Engine(
            path, max_batch=int(params.get("max_batch") or 16), dtype=_DTYPES[params.get("dtype", "float32")]
        )
        self.engine.start()
        self.name = args["model_name"]

    def execute(self, requests: list[object]) -> None:
        for request in requests:
            sender = request.get_response_sender()  # type: ignore[attr-defined]
            try:
                self.engine.submit(self._gen_request(request, sender))
            except Exception as exc:  # noqa: BLE001 - a bad request answers with an error, alone
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{self.name}: {exc}")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        return None

    def _gen_request(self, request: object, sender: object) -> GenRequest:
        ids_t = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS")
        if ids_t is not None and ids_t.as_numpy().size:
            ids = [int(x) for x in ids_t.as_numpy().reshape(-1)]
        else:
            prompt = _strings(request, "PROMPT")
            if not prompt:
                raise ValueError("give INPUT_IDS or PROMPT")
            ids = self.engine.encode(prompt[0])
        seed = _scalar(request, "SEED", None)
        images_t = pb_utils.get_input_tensor_by_name(request, "IMAGES")  # sy-vlm: [n, S, S, 3] uint8
        offsets_t = pb_utils.get_input_tensor_by_name(request, "IMAGE_OFFSETS")
        images = images_t.as_numpy() if images_t is not None and images_t.as_numpy().size else None
        offsets = [int(x) for x in offsets_t.as_numpy().reshape(-1)] if offsets_t is not None else []
        audio_t = pb_utils.get_input_tensor_by_name(request, "AUDIO")  # audio: [total samples] fp32
        lengths_t = pb_utils.get_input_tensor_by_name(request, "AUDIO_SAMPLES")
        audio_offsets_t = pb_utils.get_input_tensor_by_name(request, "AUDIO_OFFSETS")
        clips: list[np.ndarray] = []
        if audio_t is not None and audio_t.as_numpy().size:
            samples = audio_t.as_numpy().reshape(-1).astype(np.float32)
            lengths = [int(x) for x in lengths_t.as_numpy().reshape(-1)] if lengths_t is not None else []
            if not lengths or min(lengths) <= 0 or sum(lengths) != samples.size:
                raise ValueError(f"AUDIO_SAMPLES {lengths} do not split AUDIO of {samples.size} samples")
            clips = np.split(samples, np.cumsum(lengths)[:-1])
        audio_offsets = (
            [int(x) for x in audio_offsets_t.as_numpy().reshape(-1)] if audio_offsets_t is not None else []
        )
        cancelled = getattr(sender, "is_cancelled", None)

        def emit(step: GenStep) -> None:
            final = bool(step.finish_reason)
            if step.finish_reason == "error":
                resp = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{self.name}: {step.text}"))
            else:
                extra = []
                if step.logprobs:  # only when asked for (LOGPROBS >= 0) and a token came
                    k = len(step.top_ids[0])
                    extra = [
                        pb_utils.Tensor("LOGPROBS", np.asarray(step.logprobs, dtype=np.float32)),
                        pb_utils.Tensor("TOP_IDS", np.asarray(step.top_ids, dtype=np.int32).reshape(-1, k)),
                        pb_utils.Tensor(
                            "TOP_LOGPROBS", np.asarray(step.top_logprobs, dtype=np.float32).reshape(-1, k)
                        ),
                    ]
                resp = pb_utils.InferenceResponse(
                    output_tensors=extra
                    + [
                        pb_utils.Tensor("TOKEN_IDS", np.asarray(step.token_ids, dtype=np.int32)),
                        pb_utils.Tensor("TEXT", np.asarray([step.text.encode()], dtype=np.object_)),
                        pb_utils.Tensor(
                            "FINISH_REASON", np.asarray([step.finish_reason.encode()], dtype=np.object_)
                        ),
                        pb_utils.Tensor("PROMPT_TOKENS", np.asarray([step.prompt_tokens], dtype=np.int32)),
                        pb_utils.Tensor("QUEUE_US", np.asarray([step.queue_us], dtype=np.int64)),
                    ]
                )
            sender.send(resp, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0)  # type: ignore[attr-defined]

        return GenRequest(
            prompt_ids=ids,
            max_tokens=int(_scalar(request, "MAX_TOKENS", 256)),  # type: ignore[arg-type]
            emit=emit,
            temperature=float(_scalar(request, "TEMPERATURE", 1.0)),  # type: ignore[arg-type]
            top_p=float(_scalar(request, "TOP_P", 1.0)),  # type: ignore[arg-type]
            top_k=int(_scalar(request, "TOP_K", 0)),  # type: ignore[arg-type]
            min_tokens=int(_scalar(request, "MIN_TOKENS", 0)),  # type: ignore[arg-type]
            seed=int(seed) if seed is not None else None,  # type: ignore[call-overload]
            stop=_strings(request, "STOP"),
            logprobs=int(_scalar(request, "LOGPROBS", -1)),  # type: ignore[arg-type]
            images=images,
            image_offsets=offsets,
            audio=clips,
            audio_offsets=audio_offsets,
            cancelled=(lambda: bool(cancelled())) if callable(cancelled) else (lambda: False),
        )

    def finalize(self) -> None:
        self.engine.stop()
