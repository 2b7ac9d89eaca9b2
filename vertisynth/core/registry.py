"""Plugin registry: finds plugins through the `vertisynth` entry-point group, built-ins included.

Each entry point is loaded on its own: a plugin that fails to import, declares a misspelt hook,
or returns something other than spec descriptors is recorded in `broken` and skipped (or, with
`strict=True`, raises). Two plugins offering the same component name make that name ambiguous:
asking for it raises an error naming both providers.
"""
from __future__ import annotations

import importlib.metadata as md
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import attrs
import pluggy

from . import hookspecs
from .errors import PluginError, choices_text, suggest
from .specs import SPEC_KINDS, ComponentSpec

GROUP = "vertisynth"
HOOK_NAMES = {hook for hook, _ in SPEC_KINDS.values()}


@attrs.frozen
class PluginInfo:
    name: str
    module: str
    distribution: str
    version: str
    components: dict[str, list[str]]


@attrs.frozen
class BrokenPlugin:
    name: str
    distribution: str
    error: str


def _dist_of(ep: md.EntryPoint, parsed: dict[int, tuple[str, str]] | None = None) -> tuple[str, str]:
    """(name, version) of the entry point's distribution. `parsed`: what earlier entry points' distributions gave,
    by identity (one distribution's entry points share its object): its METADATA file is read and parsed once,
    not twice per entry point (≈ 1 ms each, every run and every `vertisynth --help`)."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ("(unknown distribution)", "")
    if parsed is not None and id(dist) in parsed:
        return parsed[id(dist)]
    meta = dist.metadata   # parsed on each access: read once (`dist.version` is its "Version")
    out = (meta["Name"] or dist.name, meta["Version"] or "")
    if parsed is not None:
        parsed[id(dist)] = out
    return out


class Registry:
    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self.broken: list[BrokenPlugin] = []
        self._specs: dict[str, dict[str, list[tuple[ComponentSpec, str]]]] = defaultdict(lambda: defaultdict(list))

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, strict: bool = False, entry_points: Iterable[md.EntryPoint] | None = None) -> Registry:
        reg = cls(strict=strict)
        eps = md.entry_points(group=GROUP) if entry_points is None else entry_points
        seen: set[tuple[str, str]] = set()
        eps = sorted(eps, key=lambda e: (e.name, e.value))   # (kept alive: `parsed` is keyed by their dists' ids)
        parsed: dict[int, tuple[str, str]] = {}
        for ep in eps:
            if (ep.name, ep.value) in seen:  # the same distribution visible twice on sys.path
                continue
            seen.add((ep.name, ep.value))
            reg._load_entry_point(ep, parsed)
        if strict:
            reg._check_duplicates()
        return reg

    def _fail(self, name: str, dist: str, error: str) -> None:
        if self.strict:
            raise PluginError(f"plugin {name!r} from {dist}: {error}")
        self.broken.append(BrokenPlugin(name, dist, error))

    def _load_entry_point(self, ep: md.EntryPoint, parsed: dict[int, tuple[str, str]] | None = None) -> None:
        dist, version = _dist_of(ep, parsed)
        try:
            obj = ep.load()
        except Exception as exc:  # a third-party plugin may fail in any way; record it and go on
            self._fail(ep.name, dist, f"cannot be imported ({type(exc).__name__}: {exc})")
            return
        self.add_plugin(obj, ep.name, dist, version, module=ep.value)

    def add_plugin(self, obj: Any, name: str, dist: str = "(direct)", version: str = "", module: str = "") -> None:
        """Register one plugin object (a module or class with hookimpls) in isolation."""
        misspelt = [a for a in dir(obj) if a.startswith("vertisynth_") and a not in HOOK_NAMES]
        if misspelt:
            hints = "; ".join(f"{m!r}{suggest(m, HOOK_NAMES)}" for m in misspelt)
            self._fail(name, dist, f"declares unknown hook(s) {hints}; known hooks: {choices_text(HOOK_NAMES)}")
            return
        try:
            self.pm.register(obj, name=f"{dist}:{name}")
            self.pm.check_pending()
        except Exception as exc:
            if self.pm.is_registered(obj):
                self.pm.unregister(obj)
            self._fail(name, dist, f"is not a valid plugin ({type(exc).__name__}: {exc})")
            return
        found: dict[str, list[tuple[ComponentSpec, str]]] = defaultdict(list)
        for kind, (hook, spec_cls) in SPEC_KINDS.items():
            for impl in getattr(self.pm.hook, hook).get_hookimpls():
                if impl.plugin is not obj:
                    continue
                try:
                    specs = list(impl.function() or [])
                except Exception as exc:
                    self.pm.unregister(obj)
                    self._fail(name, dist, f"hook {hook} raised {type(exc).__name__}: {exc}")
                    return
                for s in specs:
                    if not isinstance(s, spec_cls):
                        self.pm.unregister(obj)
                        self._fail(name, dist, f"hook {hook} returned {s!r}, expected {spec_cls.__name__} items")
                        return
                    found[kind].append((s, dist))
        if self.strict:   # a lazy factory ("module:Name") is imported only when used: strict imports it now
            for items in found.values():
                for s, _ in items:
                    try:
                        s.load_factory()
                        s.load_config_cls()
                    except Exception as exc:   # PluginError, or whatever the plugin's module raises at import
                        self.pm.unregister(obj)
                        why = str(exc) if isinstance(exc, PluginError) else f"{type(exc).__name__}: {exc}"
                        self._fail(name, dist, f"{s.kind} {s.name!r}: {why}")
                        return
        for kind, items in found.items():
            for spec, provider in items:
                self._specs[kind][spec.name].append((spec, provider))
        self.plugins.append(
            PluginInfo(name, module or getattr(obj, "__name__", repr(obj)), dist, version,
                       {k: [s.name for s, _ in v] for k, v in found.items()})
        )

    def _check_duplicates(self) -> None:
        for kind, names in self._specs.items():
            for name, entries in names.items():
                if len(entries) > 1:
                    raise self._duplicate_error(kind, name, entries)

    @staticmethod
    def _duplicate_error(kind: str, name: str, entries: list[tuple[ComponentSpec, str]]) -> PluginError:
        providers = " and ".join(repr(p) for _, p in entries)
        return PluginError(f"{kind} name {name!r} is provided by both {providers}; uninstall one of them")

    # -- queries ------------------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        return sorted(self._specs[kind])

    def get(self, kind: str, name: str) -> ComponentSpec:
        if kind not in SPEC_KINDS:
            raise PluginError(f"unknown plugin kind {kind!r}; kinds: {choices_text(SPEC_KINDS)}")
        entries = self._specs[kind].get(name)
        if not entries:
            broken = "".join(f"\n  note: plugin {b.name!r} ({b.distribution}) is broken: {b.error}" for b in self.broken)
            raise PluginError(
                f"unknown {kind} {name!r}{suggest(name, self._specs[kind])}; choose one of: "
                f"{choices_text(self._specs[kind])}{broken}"
            )
        if len(entries) > 1:
            raise self._duplicate_error(kind, name, entries)
        return entries[0][0]

    def providers(self, kind: str, name: str) -> int:
        """How many installed plugins offer `name` (more than one: `get` refuses it)."""
        return len(self._specs[kind].get(name, ()))

    def provider(self, kind: str, name: str) -> str:
        self.get(kind, name)
        return self._specs[kind][name][0][1]

    def describe(self) -> list[dict[str, Any]]:
        return [attrs.asdict(p) for p in self.plugins]


_DEFAULT: Registry | None = None


def default_registry() -> Registry:
    """The registry of installed plugins, loaded once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Registry.load()
    return _DEFAULT
