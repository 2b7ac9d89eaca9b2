"""Registry behaviours: built-ins via entry points, broken plugins, misspelt hooks, duplicates, unknown names."""
import sys

import pytest

from vertisynth.core.errors import PluginError
from vertisynth.core.registry import Registry

from plugin_fixtures import install_fake_dist

GOOD = """
from vertisynth import hookimpl
from vertisynth.core.specs import EvaluatorSpec

@hookimpl
def vertisynth_evaluators():
    return [EvaluatorSpec("{name}", "vertisynth.plugins.evaluators.tvd:TVDEvaluator", None, "fake")]
"""


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for mod in [m for m in sys.modules if m.startswith("fake_")]:
        del sys.modules[mod]


def test_builtins_are_found_through_entry_points():
    reg = Registry.load(strict=True)
    assert "independent" in reg.names("synthesizer")
    assert "tvd" in reg.names("evaluator")
    assert {"census", "nltcs", "adult", "csv"} <= set(reg.names("dataset"))
    assert "positional" in reg.names("aligner")
    dists = {p.distribution for p in reg.plugins}
    assert "vertisynth" in dists


def test_unknown_name_lists_choices_and_suggests():
    reg = Registry.load()
    with pytest.raises(PluginError) as e:
        reg.get("synthesizer", "independant")
    assert "did you mean 'independent'" in str(e.value)
    assert "'independent'" in str(e.value) and "choose one of" in str(e.value)


def test_broken_plugin_is_recorded_and_skipped(isolated):
    install_fake_dist(isolated, "fake-broken", {"fake_broken": "raise RuntimeError('boom at import')"},
                      {"broken": "fake_broken"})
    reg = Registry.load()
    assert any(b.name == "broken" and "boom at import" in b.error for b in reg.broken)
    assert "tvd" in reg.names("evaluator")  # the rest still works
    with pytest.raises(PluginError, match="boom at import"):
        Registry.load(strict=True)


def test_misspelt_hook_is_an_error(isolated):
    src = """
from vertisynth import hookimpl
@hookimpl
def vertisynth_synthesiser():
    return []
"""
    install_fake_dist(isolated, "fake-typo", {"fake_typo": src}, {"typo": "fake_typo"})
    reg = Registry.load()
    (b,) = [b for b in reg.broken if b.name == "typo"]
    assert "vertisynth_synthesiser" in b.error and "did you mean 'vertisynth_synthesizers'" in b.error
    with pytest.raises(PluginError, match="unknown hook"):
        Registry.load(strict=True)


def test_hook_returning_wrong_type_is_broken(isolated):
    src = """
from vertisynth import hookimpl
@hookimpl
def vertisynth_evaluators():
    return ["not a spec"]
"""
    install_fake_dist(isolated, "fake-wrong", {"fake_wrong": src}, {"wrong": "fake_wrong"})
    reg = Registry.load()
    assert any(b.name == "wrong" and "EvaluatorSpec" in b.error for b in reg.broken)


def test_duplicate_names_name_both_providers(isolated):
    install_fake_dist(isolated, "fake-dup-a", {"fake_dup_a": GOOD.format(name="twin")}, {"dup_a": "fake_dup_a"})
    install_fake_dist(isolated / "b", "fake-dup-b", {"fake_dup_b": GOOD.format(name="twin")}, {"dup_b": "fake_dup_b"})
    reg = Registry.load()
    with pytest.raises(PluginError) as e:
        reg.get("evaluator", "twin")
    assert "'fake-dup-a'" in str(e.value) and "'fake-dup-b'" in str(e.value)
    with pytest.raises(PluginError, match="provided by both"):
        Registry.load(strict=True)


def test_duplicate_of_a_builtin_name_is_reported(isolated):
    install_fake_dist(isolated, "fake-shadow", {"fake_shadow": GOOD.format(name="tvd")}, {"shadow": "fake_shadow"})
    reg = Registry.load()
    with pytest.raises(PluginError, match="'vertisynth' and 'fake-shadow'|'fake-shadow' and 'vertisynth'"):
        reg.get("evaluator", "tvd")


def test_spec_with_bad_factory_reference_fails_clearly():
    from vertisynth.core.specs import SynthesizerSpec

    spec = SynthesizerSpec("x", "no.such.module:Thing")
    with pytest.raises(PluginError, match="cannot load synthesizer 'x' factory"):
        spec.load_factory()
    with pytest.raises(PluginError, match="must look like"):
        SynthesizerSpec("y", "nocolon").load_factory()


def test_every_hookspec_has_a_builtin_implementation():
    """Like datasette's test_plugin_hooks_have_tests: each hook is exercised by a built-in plugin."""
    from vertisynth.core.specs import SPEC_KINDS

    reg = Registry.load(strict=True)
    for kind, (hook, _) in SPEC_KINDS.items():
        impls = getattr(reg.pm.hook, hook).get_hookimpls()
        assert impls, f"no plugin implements {hook}"


def test_strict_imports_lazy_factories(isolated):
    """A spec's "module:Name" factory is imported only when used; `plugins --strict` imports it, so what
    `validate` would refuse is refused there first."""
    src = GOOD.format(name="lazy").replace("vertisynth.plugins.evaluators.tvd:TVDEvaluator", "fake_lazy_impl:Missing")
    install_fake_dist(isolated, "fake-lazy", {"fake_lazy": src, "fake_lazy_impl": "X = 1"}, {"lazy": "fake_lazy"})
    reg = Registry.load()   # lazy: listed, not imported
    assert "lazy" in reg.names("evaluator")
    with pytest.raises(PluginError, match="evaluator 'lazy'.*fake_lazy_impl:Missing"):
        Registry.load(strict=True)
    from click.testing import CliRunner

    from vertisynth.cli import main
    res = CliRunner().invoke(main, ["plugins", "--strict"])
    assert res.exit_code == 2 and "fake_lazy_impl:Missing" in res.output and "Traceback" not in res.output


def test_each_distributions_metadata_is_parsed_once(monkeypatch):
    """Every entry point asked its distribution for name and version, each a fresh parse of METADATA (twice per
    entry point: ≈ 10 ms of every run and `vertisynth --help`); now once per distribution, same answers."""
    import importlib.metadata as md
    reads = []
    real = md.PathDistribution.read_text

    def counting(self, filename):
        if filename in ("METADATA", "PKG-INFO"):
            reads.append(str(self._path))
        return real(self, filename)

    monkeypatch.setattr(md.PathDistribution, "read_text", counting)
    reg = Registry.load()
    assert len(reg.plugins) >= 8 and len(reads) == len(set(reads))   # several entry points, one parse per dist
    monkeypatch.setattr(md.PathDistribution, "read_text", real)
    assert [(p.name, p.distribution, p.version) for p in reg.plugins] == \
           [(p.name, p.distribution, p.version) for p in Registry.load().plugins]
