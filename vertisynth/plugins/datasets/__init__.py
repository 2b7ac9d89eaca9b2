"""Built-in datasets: the offline `census` generator, the `zoo` of generated networks, the `nltcs`/`adult` benchmarks, and `csv`."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import DatasetSpec


@hookimpl
def vertisynth_datasets():
    return [
        DatasetSpec("census", "vertisynth.plugins.datasets.census:source",
                    "vertisynth.plugins.datasets.census:CensusConfig",
                    "built-in census-like population with a known distribution (offline default)"),
        DatasetSpec("zoo", "vertisynth.plugins.datasets.zoo:source",
                    "vertisynth.plugins.datasets.zoo:ZooConfig",
                    "generated tables with known truth from random Bayesian networks, by named preset"),
        DatasetSpec("nltcs", "vertisynth.plugins.datasets.files:nltcs",
                    "vertisynth.plugins.datasets.files:BenchmarkConfig",
                    "NLTCS benchmark (21,574 x 16 binary) from the data folder"),
        DatasetSpec("adult", "vertisynth.plugins.datasets.files:adult",
                    "vertisynth.plugins.datasets.files:BenchmarkConfig",
                    "Adult benchmark (45,222 x 15, discretised) from the data folder"),
        DatasetSpec("csv", "vertisynth.plugins.datasets.files:csv",
                    "vertisynth.plugins.datasets.files:CsvConfig",
                    "any CSV with a public schema (or an integer-coded CSV with a JSON domain)"),
        DatasetSpec("party_csv", "vertisynth.plugins.datasets.files:party_csv",
                    "vertisynth.plugins.datasets.files:PartyCsvConfig",
                    "one CSV per party keyed by an identifier column (align with psi or psu)"),
    ]
