"""Structuring settings (TOML tables) into attrs config classes: unknown keys and wrong types rejected by name.

Every component's params, the run config and the parts' own sections go through `structure`."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import cattrs
import cattrs.cols

from .errors import ConfigError, VertisynthError, choices_text, suggest


def _strict_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)

    def s_int(v: Any, _t: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"expected an integer, got {v!r}")
        return v

    def s_float(v: Any, _t: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"expected a number, got {v!r}")
        return float(v)

    def s_str(v: Any, _t: Any) -> str:
        if not isinstance(v, str):
            raise TypeError(f"expected a string, got {v!r}")
        return v

    def s_bool(v: Any, _t: Any) -> bool:
        if not isinstance(v, bool):
            raise TypeError(f"expected true or false, got {v!r}")
        return v

    def is_list_or_tuple(t: Any) -> bool:
        return not cattrs.cols.is_bare(t) and (cattrs.cols.is_mutable_sequence(t) or cattrs.cols.get_origin(t) is tuple)

    def no_text_as_list(t: Any) -> Any:
        """A list or tuple setting given one string: refused (cattrs would split "upper" into its letters)."""
        base = cattrs.cols.list_structure_factory(t, conv) if cattrs.cols.is_mutable_sequence(t) else \
            conv._structure_tuple

        def hook(v: Any, _t: Any) -> Any:
            if isinstance(v, (str, bytes)):
                raise TypeError(f"expected a list, got the string {v!r} (write [{v!r}] for one item)")
            return base(v, _t)
        return hook

    conv.register_structure_hook_factory(is_list_or_tuple, no_text_as_list)
    conv.register_structure_hook(int, s_int)
    conv.register_structure_hook(float, s_float)
    conv.register_structure_hook(str, s_str)
    conv.register_structure_hook(bool, s_bool)
    return conv


CONVERTER = _strict_converter()


def _format(exc: BaseException, _type: Any) -> str:
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        renamed = getattr(exc.cl, "toml_keys", {})   # fields spelt otherwise in TOML (e.g. alias -> "as")
        removed = getattr(exc.cl, "removed_keys", {})   # keys that are gone: what replaced them
        valid = [renamed.get(f.name, f.name) for f in attrs.fields(exc.cl)]
        gone = [k for k in sorted(exc.extra_fields) if k in removed]
        if gone:
            return "; ".join(f"{k!r} was removed: {removed[k]}" for k in gone)
        parts = [f"unknown key {k!r}{suggest(k, valid)}" for k in sorted(exc.extra_fields)]
        return "; ".join(parts) + f"; valid keys: {choices_text(valid)}"
    if isinstance(exc, KeyError):
        return f"required key {exc.args[0]!r} is missing"
    if isinstance(exc, VertisynthError):
        return str(exc)
    return f"{exc}"


def structure(data: Any, cls: type, where: str) -> Any:
    """Structure `data` into `cls`, raising ConfigError with every problem and where it is."""
    if data is None:
        data = {}
    if attrs.has(cls) and not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a table of settings, got {data!r}")
    try:
        return CONVERTER.structure(data, cls)
    except VertisynthError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
        if isinstance(exc, cattrs.BaseValidationError):
            msgs = cattrs.transform_error(exc, path="", format_exception=_format)
        else:
            msgs = [str(exc)]
        lines = []
        for m in msgs:
            text, _, loc = m.partition(" @ ")
            loc = loc.lstrip(".")
            lines.append(f"{where}{'.' + loc if loc else ''}: {text}")
        raise ConfigError("\n".join(lines)) from None
