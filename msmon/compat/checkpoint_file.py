"""One checkpoint file read without MindSpore: is it whole, and which step does it hold.

A half-written checkpoint must never be resumed from. MindSpore writes ``NAME.tmp`` and renames it to
``NAME.ckpt`` / ``NAME.safetensors`` when done, but a machine that dies after the rename can still leave a
short file, and the file name is no guide to the step (mindformers names a resumed run's files by the
step counted from the resume: ``-1_100`` may hold step 300). So both formats are walked here:

- ``.ckpt``: MindSpore's protobuf ``Checkpoint`` messages one after another (field 1, a ``Value`` of tag
  and ``TensorProto``), optionally ending in ``crc_num`` and 10 bytes; whole when the walk ends exactly at
  the end of the file. Only the few scalar entries are read; the tensors are skipped with ``seek``.
- ``.safetensors``: an 8-byte header length, a JSON header (dtype, shape, offsets), the data; whole when
  the file is as long as the header says.

The step is the ``step_num`` mindformers appends to every checkpoint (with ``epoch_num``, ``global_step``,
``loss_scale``, ``global_batch_size``).
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

#: The scalar entries mindformers' CheckpointMonitor appends to a checkpoint (``append_info``).
SCALARS = ("step_num", "epoch_num", "global_step", "loss_scale", "global_batch_size")
FORMATS = {".ckpt": "ckpt", ".safetensors": "safetensors"}
_CRC_TRAILER = b"crc_num"
_PROTO_TYPES = {"Int32": "<i", "Int64": "<q", "Float32": "<f", "Float64": "<d", "Int16": "<h", "Int8": "<b",
                "UInt8": "<B", "Bool": "<?"}
_SAFETENSORS_TYPES = {"I32": "<i", "I64": "<q", "F32": "<f", "F64": "<d", "I16": "<h", "I8": "<b", "U8": "<B",
                      "BOOL": "<?"}
_MAX_HEADER = 100 * 1024 * 1024


class Incomplete(ValueError):
    """The file is cut short or is not a checkpoint of its format."""


@dataclass
class CheckpointFile:
    """A whole checkpoint file and the scalars mindformers appended to it."""

    path: Path
    format: str
    scalars: dict[str, float] = field(default_factory=dict)

    @property
    def step(self) -> int | None:
        value = self.scalars.get("step_num")
        return int(value) if value is not None else None


def read_checkpoint(path: Path) -> CheckpointFile:
    """The checkpoint at ``path`` when it is whole; Incomplete (or OSError) otherwise."""
    fmt = FORMATS.get(path.suffix)
    if fmt is None:
        raise Incomplete(f"{path.name}: not a .ckpt or .safetensors file")
    with open(path, "rb") as handle:
        size = path.stat().st_size
        scalars = _ckpt_scalars(handle, size) if fmt == "ckpt" else _safetensors_scalars(handle, size)
    return CheckpointFile(path, fmt, scalars)


def _varint(handle: BinaryIO) -> int:
    result, shift = 0, 0
    while True:
        byte = handle.read(1)
        if not byte:
            raise Incomplete("cut inside a length")
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise Incomplete("a length longer than 64 bits")


def _fields(data: bytes) -> dict[int, list[bytes | int]]:
    """The fields of one small protobuf message (varints and length-delimited only)."""
    found: dict[int, list[bytes | int]] = {}
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        key = _varint(stream)
        number, wire = key >> 3, key & 7
        if wire == 0:
            found.setdefault(number, []).append(_varint(stream))
        elif wire == 2:
            length = _varint(stream)
            found.setdefault(number, []).append(stream.read(length))
        else:
            raise Incomplete(f"unexpected protobuf wire type {wire}")
    return found


def _ckpt_scalars(handle: BinaryIO, size: int) -> dict[str, float]:
    scalars: dict[str, float] = {}
    while True:
        start = handle.tell()
        if start == size:
            return scalars
        if size - start == len(_CRC_TRAILER) + 10 and handle.read(len(_CRC_TRAILER)) == _CRC_TRAILER:
            return scalars
        handle.seek(start)
        if handle.read(1) != b"\x0a":  # field 1 (Checkpoint.value), length-delimited
            raise Incomplete(f"no checkpoint entry at byte {start} (an encrypted or foreign file?)")
        length = _varint(handle)
        body = handle.tell()
        if body + length > size:
            raise Incomplete(f"cut short: an entry at byte {start} needs {body + length - size} more bytes")
        head = handle.read(min(length, 256))
        tag = _value_tag(head)
        if tag in SCALARS and length <= 4096:
            value = _proto_scalar(head + handle.read(length - len(head)))
            if value is not None:
                scalars[tag] = value
        handle.seek(body + length)


def _value_tag(head: bytes) -> str | None:
    """The tag of a ``Checkpoint.Value`` from its first bytes (field 1, a string)."""

    stream = io.BytesIO(head)
    try:
        if _varint(stream) != 0x0A:
            return None
        length = _varint(stream)
        raw = stream.read(length)
    except Incomplete:
        return None
    return raw.decode("utf-8", "replace") if len(raw) == length else None


def _proto_scalar(value: bytes) -> float | None:
    tensor = _fields(value).get(2)
    if not tensor or not isinstance(tensor[0], bytes):
        return None
    parts = _fields(tensor[0])
    kind = parts.get(2, [b""])[0]
    content = parts.get(3, [b""])[0]
    if not isinstance(kind, bytes) or not isinstance(content, bytes):
        return None
    code = _PROTO_TYPES.get(kind.decode("utf-8", "replace"))
    if code is None or len(content) != struct.calcsize(code):
        return None
    return float(struct.unpack(code, content)[0])


def _safetensors_scalars(handle: BinaryIO, size: int) -> dict[str, float]:
    raw = handle.read(8)
    if len(raw) < 8:
        raise Incomplete("cut inside the header length")
    (length,) = struct.unpack("<Q", raw)
    if length > min(size - 8, _MAX_HEADER):
        raise Incomplete(f"cut short: the header alone needs {length} bytes")
    try:
        header = json.loads(handle.read(length))
    except (ValueError, UnicodeDecodeError) as exc:
        raise Incomplete(f"unreadable header ({exc})") from None
    if not isinstance(header, dict):
        raise Incomplete("the header is not a JSON object")
    entries = {name: spec for name, spec in header.items() if name != "__metadata__" and isinstance(spec, dict)}
    end = max((int(spec["data_offsets"][1]) for spec in entries.values()), default=0)
    if 8 + length + end != size:
        raise Incomplete(f"cut short: {size} bytes where the header describes {8 + length + end}")
    scalars: dict[str, float] = {}
    for name in SCALARS:
        spec = entries.get(name)
        code = _SAFETENSORS_TYPES.get(str(spec.get("dtype"))) if spec else None
        if spec is None or code is None:
            continue
        begin, stop = (int(x) for x in spec["data_offsets"])
        if stop - begin != struct.calcsize(code):
            continue
        handle.seek(8 + length + begin)
        scalars[name] = float(struct.unpack(code, handle.read(stop - begin))[0])
    return scalars
