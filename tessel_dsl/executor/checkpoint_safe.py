"""Reading a torch.distributed.checkpoint directory without running code from it.

DCP stores its `.metadata` file, and every non-tensor value (an optimizer group's `lr` or
`betas`), as pickles, and its own reader loads both with unrestricted unpickling: a checkpoint
directory from someone else can run any code in the loading process. `SafeReader` unpickles the
metadata with a fixed list of the classes DCP writes there, and `SafePlanner` loads non-tensor
values with ``torch.load(weights_only=True)``; tensors are already loaded that way by DCP. Anything
else in the files is refused with `UnsafeCheckpoint` before it is built.
"""
from __future__ import annotations

import io
import pickle

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

_METADATA = "torch.distributed.checkpoint.metadata"
# What DCP's FileSystemWriter pickles into `.metadata` (read from torch 2.13): its dataclasses, the
# tensor properties' dtype, layout and memory format, torch.Size, and the checkpoint's path.
ALLOWED = {
    (_METADATA, name) for name in ("Metadata", "MetadataIndex", "StorageMeta", "TensorProperties",
                                   "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                                   "_MEM_FORMAT_ENCODING")
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PureWindowsPath"),
}


class UnsafeCheckpoint(Exception):
    """A checkpoint file names something that loading it would have to build or call."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format)):
            return getattr(torch, name)
        raise UnsafeCheckpoint(f"it names {module}.{name}, which DCP metadata never holds")

    def persistent_load(self, pid):
        raise UnsafeCheckpoint("it holds a persistent reference, which DCP metadata never holds")


def read_metadata(data: bytes) -> Metadata:
    """DCP metadata from the bytes of a `.metadata` file, unpickled with the allowed classes only."""
    try:
        md = _MetadataUnpickler(io.BytesIO(data)).load()
    except UnsafeCheckpoint:
        raise
    except Exception as e:  # a truncated or garbled file
        raise ValueError(f"unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(md, Metadata):
        raise ValueError(f"holds a {type(md).__name__}, not DCP metadata")
    return md


class SafeReader(FileSystemReader):
    """A FileSystemReader whose metadata is unpickled by `read_metadata` (or, `trusted`, by
    pickle as DCP does). `prefetch()` reads it once ahead of `dcp.load`, so that an unreadable or
    unsafe file is reported by the caller rather than inside DCP's collectives (which log a
    traceback and retry another file)."""

    def __init__(self, path, trusted: bool = False):
        super().__init__(path)
        self._metadata: Metadata | None = None
        self._trusted = trusted

    def prefetch(self) -> Metadata:
        path = self._get_metadata_path()
        with self.fs.create_stream(path, "rb") as f:
            data = f.read()
        if not self._trusted:
            self._metadata = read_metadata(data)
            return self._metadata
        try:
            md = pickle.loads(data)
        except Exception as e:  # a truncated or garbled file
            raise ValueError(f"unreadable ({type(e).__name__}: {e})") from None
        if not isinstance(md, Metadata):
            raise ValueError(f"holds a {type(md).__name__}, not DCP metadata")
        self._metadata = md
        return md

    def read_metadata(self, *args, **kwargs) -> Metadata:
        md = self._metadata if self._metadata is not None and kwargs.get("rank") is None else None
        if md is None:
            path = self._get_metadata_path(kwargs.get("rank"))
            with self.fs.create_stream(path, "rb") as f:
                md = read_metadata(f.read())
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        return md


class SafePlanner(DefaultLoadPlanner):
    """DCP's default load planner, with non-tensor values loaded with ``weights_only=True``
    (plain numbers, strings, tuples, lists, dicts and tensors)."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        from torch.distributed.checkpoint._traverse import set_element

        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if "Unsupported" in ln or "GLOBAL" in ln]
            why = lines[0].split(". ")[0] if lines else type(e).__name__  # not torch's advice to allow it
            raise UnsafeCheckpoint(f"value {read_item.dest_index.fqn!r} is not plain data ({why})") from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj
