"""Trace files for ``kvtrace replay FILE``: ``.npz`` arrays, and Mooncake or Bailian JSONL read by
the block-trace reader of the ingest (``kvtrace.analyze.load.read_block_trace``).

An ``.npz`` holds the ``BlockTrace`` arrays (``ts`` in seconds, ``input_length``,
``output_length``, ``offsets``, ``hash_ids``, optional ``session``, scalar ``block_size``): the
format for traces too large for JSON (see ``save_npz``).
"""

from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

import numpy as np

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.load import read_block_trace
from kvtrace.errors import BadTraceInput


def read_trace(path: str | Path, block_size: int | None = None, format: str | None = None) -> BlockTrace:
    """A block trace from an ``.npz`` or a block-hash file (Mooncake, Bailian JSONL).

    Args:
        path: the file.
        block_size: tokens per block of a file that does not say (see
            ``kvtrace.ingest.block_hash``); when it was assumed, ``meta["block_size_assumed"]``
            says so (the replay reports it).
        format: ``npz``, ``mooncake`` or ``bailian`` (default: ``npz`` for a ``.npz`` file, else
            detected from the file's first lines).
    """
    path = Path(path)
    if not path.exists():
        raise BadTraceInput(path, None, "no such file", hint="give a Mooncake .jsonl trace, an .npz, or --db")
    if format == "npz" or format is None and path.suffix == ".npz":
        return load_npz(path)
    return read_block_trace(path, format=format, block_size=block_size)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".ndjson", ".json", ".npz"):
        name = name.removesuffix(suffix)
    return name or "trace"


ALIGN = 64  # where each array's data starts in a saved .npz (the .npy header pads to it too)
_ALIGN_ID = 0xA11E  # zip extra field "data stream alignment" (APPNOTE): the alignment, then padding


def save_npz(trace: BlockTrace, path: str | Path) -> None:
    """Write a trace as ``.npz`` (ids as int32 when they fit, to halve the file): a zip of
    uncompressed ``.npy`` members, as ``np.savez`` writes, each member's data starting at a
    multiple of 64 bytes of the file so ``load_npz`` can map it. Written to a temporary file and
    renamed into place (a replay mapping the old file keeps reading it)."""
    path = Path(path)
    ids = trace.hash_ids
    if ids.size and ids.min() >= 0 and ids.max() < 2**31:
        ids = ids.astype(np.int32, copy=False)
    arrays = dict(
        ts=trace.ts,
        input_length=trace.input_length,
        output_length=trace.output_length,
        offsets=trace.offsets,
        hash_ids=ids,
        block_size=np.int64(trace.block_size),
    )
    if trace.session is not None:
        arrays["session"] = trace.session
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, arr in arrays.items():
                arr = np.asanyarray(arr)
                info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                # local header: 30 bytes, the name, the alignment field, the 20-byte zip64 field
                at = zf.fp.tell() + 30 + len(info.filename.encode()) + 6 + 20
                pad = -at % ALIGN
                info.extra = struct.pack("<HHH", _ALIGN_ID, 2 + pad, ALIGN) + bytes(pad)
                with zf.open(info, "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, arr, allow_pickle=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _stored_member(z, name: str) -> np.ndarray | None:
    """Member ``name`` of the ``.npz`` opened as ``z``, mapped read-only from the file when it is
    stored uncompressed, one-dimensional and aligned to its item size (``save_npz`` aligns every
    member): its pages are read as they are used, and are the page cache's to drop, so a trace
    need not fit in memory. None when it cannot be mapped (it is then read). Read and mapped
    through ``z``'s open file: a file renamed over the path meanwhile is not mixed in."""
    member = f"{name}.npy" if f"{name}.npy" in z.zip.NameToInfo else name
    info = z.zip.getinfo(member)
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    f = z.fid
    f.seek(info.header_offset)
    local = f.read(30)  # the member's local header: its name and extra field lengths follow
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise ValueError(f"{member}: bad zip local header")
    n_name, n_extra = struct.unpack("<HH", local[26:30])
    f.seek(info.header_offset + 30 + n_name + n_extra)
    version = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(f)
    start = f.tell()
    if dtype.hasobject or len(shape) != 1 or start % dtype.itemsize:
        return None
    if start + dtype.itemsize * shape[0] > os.fstat(f.fileno()).st_size:
        raise ValueError(f"{member}: the file is shorter than its array")
    if shape[0] == 0:
        return np.zeros(0, dtype=dtype)
    return np.asarray(np.memmap(f, dtype=dtype, mode="r", offset=start, shape=shape, order="F" if fortran else "C"))


def _member(z, name: str) -> np.ndarray:
    mapped = _stored_member(z, name)
    return z[name] if mapped is None else mapped


def load_npz(path: str | Path) -> BlockTrace:
    """A trace saved by ``save_npz``; its arrays are mapped from the file when stored uncompressed."""
    path = Path(path)
    try:
        with np.load(path) as z:  # the maps outlive the file object (they hold their own handle)
            kw = {k: _member(z, k) for k in ("ts", "input_length", "output_length", "offsets", "hash_ids")}
            session = _member(z, "session") if "session" in z.files else None
            bs = int(z["block_size"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise BadTraceInput(
            path,
            None,
            f"not a kvtrace .npz trace ({e})",
            hint="it needs ts, input_length, output_length, offsets, hash_ids, block_size",
        ) from e
    try:
        trace = BlockTrace(
            kw["ts"],
            kw["input_length"],
            kw["output_length"],
            kw["offsets"],
            kw["hash_ids"],  # int32 ids stay int32 (the replay engines take either width)
            bs,
            session=session,
            name=_stem(path),
        )
    except ValueError as e:
        raise BadTraceInput(path, None, str(e), hint="offsets has one more entry than requests") from e
    if len(trace.hash_ids) != trace.n_blocks:
        raise BadTraceInput(
            path,
            None,
            f"{len(trace.hash_ids)} hash_ids for {trace.n_blocks} blocks in offsets",
            field="hash_ids",
            hint="offsets[-1] must equal len(hash_ids)",
        )
    return trace
