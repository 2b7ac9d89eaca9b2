"""Study outputs: results.csv / results.parquet (tidy), summary.md (mean ± std per dataset, method, ε) and
one PNG per (dataset, metric): metric vs ε (ticks at the grid's ε values), one line per method, error bars = std
over repeats (cf. the VertiMRF paper's Figures 4-5). A single repeat shows 'value (n=1)', not '± 0'.
report.html: the leaderboard (method × dataset × ε, mean and 95% interval over repeats) and those figures."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from vertisynth.run.html import write_study_html


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def write_outputs(table: pd.DataFrame, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "results.csv", index=False)
    table.to_parquet(out / "results.parquet", index=False)
    lines = ["# Study summary", "", f"{table['cell'].nunique() if len(table) else 0} cells, "
             f"{len(table)} metric rows. Values are mean ± std over repeats (one repeat: the value, n=1).", ""]
    figure_files: list[tuple[str, str, Path]] = []
    if len(table):
        table = table.assign(name=table["evaluator"] + "." + table["metric"], method=_method_and_point(table))
        agg = (table.groupby(["dataset", "method", "epsilon", "name"])["value"]
               .agg(["mean", "std", "count"]).reset_index())
        for (dataset, name), part in agg.groupby(["dataset", "name"]):
            lines += [f"## {dataset}: {name}", "", "| method | ε | mean ± std | runs |", "|---|---|---|---|"]
            for r in part.itertuples():
                lines.append(f"| {r.method} | {r.epsilon:g} | {mean_std(r.mean, r.std, r.count)} | {r.count} |")
            png = _plot(part, dataset, name, out)
            figure_files.append((dataset, name, out / png))
            lines += ["", f"![{dataset} {name}]({png})", ""]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    write_study_html(table, out, figure_files)   # `method` names the grid point too, as in the summary


def _method_and_point(table: pd.DataFrame) -> pd.Series:
    """The method label plus the other grid keys that vary (e.g. parties.count), so that different grid points
    are never averaged together as if they were repeats."""
    own = ("grid:dataset.name", "grid:budget.epsilon")
    extra = [c for c in table.columns if c.startswith("grid:") and c not in own
             and not c[5:].startswith(("synthesizer", "collab"))
             and table.groupby("dataset")[c].nunique().max() > 1]   # constant within a dataset: its label says it
    if not extra:
        return table["method"]
    point = table[extra].astype(str).apply(lambda r: ",".join(f"{c[5:]}={v}" for c, v in r.items()), axis=1)
    return table["method"] + " [" + point + "]"


def mean_std(mean: float, std: float, count: int) -> str:
    """'mean ± std' over repeats; with one repeat there is no spread to show: 'value (n=1)'."""
    if count < 2 or pd.isna(std):
        return f"{mean:.4f} (n={count})"
    return f"{mean:.4f} ± {std:.4f}"


def _plot(part: pd.DataFrame, dataset: str, name: str, out: Path) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for method, m in part.groupby("method"):
        m = m.sort_values("epsilon")
        ax.errorbar(m["epsilon"], m["mean"], yerr=m["std"].fillna(0.0), marker="o", capsize=3, label=method)
    ax.set_xscale("log", base=2)
    eps = sorted(part["epsilon"].unique())   # the grid's ε values as ticks, not powers of two
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.minorticks_off()
    ax.set_xlabel("ε")
    ax.set_ylabel(name)
    ax.set_title(dataset)
    ax.legend()
    fig.tight_layout()
    rel = f"figures/{_slug(dataset)}__{_slug(name)}.png"
    (out / "figures").mkdir(exist_ok=True)
    fig.savefig(out / rel, dpi=100)
    plt.close(fig)
    return rel
