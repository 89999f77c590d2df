"""The safetensors header of an upload, parsed by hand: nothing uploaded is ever unpickled or loaded."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from .names import refuse

MAX_HEADER_BYTES = 16 * 1024 * 1024
REFUSED_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")

DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def check_model_filename(filename: str | None) -> None:
    if filename and filename.lower().endswith(REFUSED_SUFFIXES):
        refuse(
            f"adapter_model {filename!r} refused: only safetensors is accepted (pickle-based "
            f"{', '.join(REFUSED_SUFFIXES)} files can run code when loaded)",
            "not_safetensors",
            "adapter_model",
            400,
        )


def check_not_pickle(head: bytes) -> None:
    """Pickles start with PROTO (0x80, protocol 2-5); torch .pt files are zip archives."""
    if len(head) >= 2 and head[0] == 0x80 and 1 <= head[1] <= 5:
        refuse(
            "adapter_model refused: it is a pickle file; only safetensors is accepted",
            "not_safetensors",
            "adapter_model",
            400,
        )
    if head.startswith(b"PK\x03\x04"):
        refuse(
            "adapter_model refused: it is a zip archive (torch .pt); only safetensors is accepted",
            "not_safetensors",
            "adapter_model",
            400,
        )


def json_object(raw: bytes, fail: Callable[[str], None]) -> dict[str, Any]:
    """`raw` as a JSON object, the one parse of the uploaded JSON (safetensors header, adapter
    config); else `fail(why)` refuses: not UTF-8 JSON, or JSON but not an object."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        fail(f"not JSON ({exc})")
    if not isinstance(value, dict):
        fail("not a JSON object")
    return value


def _corrupt(why: str) -> None:
    refuse(f"corrupt safetensors header: {why}", "corrupt_safetensors", "adapter_model", 400)


def read_safetensors_header(f: BinaryIO, file_size: int) -> dict[str, TensorInfo]:
    """Parse and check the header: known dtypes, shapes × dtype size = bytes, offsets tile the data."""
    f.seek(0)
    head = f.read(8)
    check_not_pickle(head)
    if len(head) < 8:
        _corrupt(f"file is {file_size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", head)
    if n < 2 or n > MAX_HEADER_BYTES:
        _corrupt(f"header length {n} outside 2..{MAX_HEADER_BYTES}")
    if 8 + n > file_size:
        _corrupt(f"header length {n} runs past the end of the {file_size}-byte file")
    raw = f.read(n)
    if len(raw) != n:
        _corrupt("file ends inside the header")
    header = json_object(raw, lambda why: _corrupt(f"header is {why}"))
    meta = header.pop("__metadata__", None)
    if meta is not None and (
        not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values())
    ):
        _corrupt("__metadata__ must map strings to strings")
    if not header:
        _corrupt("no tensors")
    data_len = file_size - 8 - n
    tensors: dict[str, TensorInfo] = {}
    for name, t in header.items():
        if not isinstance(t, dict) or set(t) != {"dtype", "shape", "data_offsets"}:
            _corrupt(f"tensor {name!r} needs exactly dtype, shape and data_offsets")
        dtype, shape, offs = t["dtype"], t["shape"], t["data_offsets"]
        if dtype not in DTYPE_BYTES:
            _corrupt(f"tensor {name!r} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            _corrupt(f"tensor {name!r} shape {shape!r} is not a list of non-negative integers")
        if (
            not isinstance(offs, list)
            or len(offs) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
            or not 0 <= offs[0] <= offs[1]
        ):
            _corrupt(f"tensor {name!r} data_offsets {offs!r} are not [begin, end] with begin <= end")
        if offs[1] > data_len:
            _corrupt(f"tensor {name!r} data_offsets {offs!r} run past the {data_len} data bytes")
        want = math.prod(shape) * DTYPE_BYTES[dtype]
        if offs[1] - offs[0] != want:
            _corrupt(
                f"tensor {name!r} is {offs[1] - offs[0]} bytes, but shape {shape} of {dtype} needs {want}"
            )
        tensors[name] = TensorInfo(name, dtype, tuple(shape), offs[0], offs[1])
    pos = 0
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin != pos:
            _corrupt(
                f"data_offsets are not contiguous: tensor {t.name!r} starts at {t.begin}, expected {pos}"
            )
        pos = t.end
    if pos != data_len:
        _corrupt(f"tensors cover {pos} of {data_len} data bytes (the file has trailing bytes)")
    return tensors
