"""What crosses the party boundary. The server works on messages only, never on a party's rows.

A message is a frozen attrs class; it saves to a single `.npz` file (arrays, no pickle) with a
JSON header naming its kind, and is validated on load (types, shapes, finite values, domain).
"""
from __future__ import annotations

import io
import json
import os
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any, ClassVar

import attrs
import numpy as np

from .domain import Domain
from .errors import DomainError, MessageError

FORMAT_VERSION = 1
MESSAGE_TYPES: dict[str, type[Message]] = {}


@attrs.frozen(eq=False)
class Message:
    """Base class. Subclasses set `kind` and may extend `validate` with their own checks."""

    kind: ClassVar[str] = "message"
    party: str

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "kind" in cls.__dict__:
            MESSAGE_TYPES[cls.kind] = cls

    # -- validation ---------------------------------------------------------------------------
    def validate(self) -> Message:
        """Check types and finite values; subclasses add shape and domain checks."""
        if not isinstance(self.party, str) or not self.party:
            raise MessageError(f"{self.kind} message: party must be a non-empty string, got {self.party!r}")
        for f in attrs.fields(type(self)):
            value = getattr(self, f.name)
            arrays = value.items() if isinstance(value, dict) else [(None, value)]
            for key, arr in arrays:
                if isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                    where = f"{f.name}[{key!r}]" if key is not None else f.name
                    raise MessageError(f"{self.kind} message from {self.party!r}: {where} holds NaN or inf")
        return self

    def _fail(self, text: str) -> MessageError:
        return MessageError(f"{self.kind} message from {self.party!r}: {text}")

    # -- files --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_bytes(self.to_bytes())
        return path

    def to_bytes(self) -> bytes:
        arrays: dict[str, np.ndarray] = {}
        header: dict[str, Any] = {"format": FORMAT_VERSION, "kind": self.kind, "fields": {}}
        for f in attrs.fields(type(self)):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                arrays[f"a/{f.name}"] = value
                header["fields"][f.name] = {"as": "array"}
            elif isinstance(value, dict) and value and all(isinstance(v, np.ndarray) for v in value.values()):
                keys = [str(k) for k in value]
                for i, v in enumerate(value.values()):
                    arrays[f"d/{f.name}/{i}"] = v
                header["fields"][f.name] = {"as": "array_dict", "keys": keys}
            elif isinstance(value, Domain):
                header["fields"][f.name] = {"as": "domain", "value": value.to_dict()}
            else:
                header["fields"][f.name] = {"as": "json", "value": _jsonable(value)}
        buf = io.BytesIO()
        np.savez_compressed(buf, __header__=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **arrays)
        return buf.getvalue()

    @classmethod
    def load(cls, path: str | Path) -> Message:
        """Load and validate a message file; `SomeMessage.load` also checks the kind."""
        path = Path(path)
        if not path.is_file():
            raise MessageError(f"message file {str(path)!r} does not exist")
        return cls.from_bytes(path.read_bytes(), path)

    @classmethod
    def from_bytes(cls, data: bytes, path: str | Path = "<bytes>") -> Message:
        """Parse and validate a message (e.g. an envelope's body)."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                header = json.loads(bytes(npz["__header__"]).decode())
                data = {k: npz[k] for k in npz.files if k != "__header__"}
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
            raise MessageError(f"message file {str(path)!r} is truncated or not a vertisynth message ({exc})") from None
        if header.get("format") != FORMAT_VERSION:
            raise MessageError(f"message file {str(path)!r} has format {header.get('format')!r}, expected {FORMAT_VERSION}")
        kind = header.get("kind")
        mtype = MESSAGE_TYPES.get(kind)
        if mtype is None:
            raise MessageError(f"message file {str(path)!r} has unknown kind {kind!r}; known: {sorted(MESSAGE_TYPES)}")
        if cls is not Message and not issubclass(mtype, cls):
            raise MessageError(f"message file {str(path)!r} holds a {kind!r} message, expected {cls.kind!r}")
        kwargs: dict[str, Any] = {}
        try:
            for name, spec in header["fields"].items():
                how = spec["as"]
                if how == "array":
                    kwargs[name] = data[f"a/{name}"]
                elif how == "array_dict":
                    kwargs[name] = {k: data[f"d/{name}/{i}"] for i, k in enumerate(spec["keys"])}
                elif how == "domain":
                    kwargs[name] = Domain.from_dict(spec["value"])
                else:
                    kwargs[name] = spec["value"]
            expected = {f.name for f in attrs.fields(mtype)}
            if set(kwargs) != expected:
                raise MessageError(
                    f"message file {str(path)!r}: fields {sorted(kwargs)} do not match {kind!r}'s {sorted(expected)}"
                )
            msg = mtype(**kwargs)
        except (KeyError, TypeError, DomainError) as exc:
            raise MessageError(f"message file {str(path)!r} is malformed: {exc}") from None
        return msg.validate()


# -- a folder shared by parties on different machines (synced or mounted) ---------------------------------
def publish(msg: Message, folder: Path, name: str) -> Path:
    """Save `msg` into a shared folder under `name`, atomically: readers never see half a file."""
    tmp = folder / (name + ".part")
    msg.save(tmp)
    os.replace(tmp, folder / name)
    return folder / name


def wait_for_files(folder: Path, pattern: str, want: int, what: str, timeout: float, poll: float = 0.1) -> list[Path]:
    """The files in `folder` matching `pattern` once there are at least `want` (sorted); a clear error after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        files = sorted(folder.glob(pattern))
        if len(files) >= want:
            return files
        if time.monotonic() > deadline:
            raise MessageError(f"waited {timeout:.0f} s for {what} in {str(folder)!r}, found {len(files)} of {want}; "
                               "is another party down?")
        time.sleep(poll)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


@attrs.frozen(eq=False)
class NoisyMarginals(Message):
    """Noisy contingency tables a party measured on its own attributes (e.g. DP 1-way marginals)."""

    kind: ClassVar[str] = "noisy_marginals"
    domain: Domain = attrs.field(default=None)
    marginals: dict[str, np.ndarray] = attrs.field(factory=dict)  # key: attributes joined by "|"

    def validate(self) -> NoisyMarginals:
        super().validate()
        if not isinstance(self.domain, Domain):
            raise self._fail("domain is missing")
        for key, arr in self.marginals.items():
            attrs_ = key.split("|")
            try:
                shape = self.domain.project(attrs_).shape
            except DomainError as exc:
                raise self._fail(f"marginal {key!r}: {exc}") from None
            if not isinstance(arr, np.ndarray) or arr.shape != shape:
                raise self._fail(f"marginal {key!r} has shape {getattr(arr, 'shape', None)}, expected {shape}")
            if arr.dtype.kind not in "fiu":
                raise self._fail(f"marginal {key!r} has non-numeric dtype {arr.dtype}")
        return self
