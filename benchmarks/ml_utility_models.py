"""ml_utility's numpy models against the scikit-learn models it used before, on the same tables.

    PYTHONPATH=$PWD python benchmarks/ml_utility_models.py [--datasets census,adult,zoo:mixed] [--seeds 0,1]
                                                           [--synthesizers vertimrf,independent] [--eps 1.0]

For each dataset, synthesizer and seed, one pipeline run (VertiMRF with its defaults, or independent columns as
a synthesizer that keeps no association) hands its training rows, holdout and synthetic table to both versions of
the evaluator: `ml_utility` as it is now (vertisynth/plugins/evaluators/models.py) and the scikit-learn pipeline
it replaced (OneHotEncoder + LogisticRegression(max_iter=300) / DecisionTreeClassifier(max_depth=10,
random_state=0)), both drawing their row samples from the same seeded generator. Prints every metric of both
side by side, the share of holdout predictions on which the two agree, and the CPU seconds of each evaluation
(scikit-learn's import, ≈ 1.7 CPU s, is measured apart in a fresh interpreter). A dataset without `label`
(NLTCS) is scored on its last attribute. NLTCS/Adult need VERTISYNTH_DATA.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vertisynth.plugins.evaluators import ml  # noqa: E402
from vertisynth.run.config import parse_config  # noqa: E402
from vertisynth.run.pipeline import run  # noqa: E402

LABELS = {"census": "income", "adult": "income"}


def sklearn_ml_utility(train, holdout, synthetic, label, max_train, rng):
    """The evaluator as it was (commit f149210): scikit-learn's models on one-hot codes, with predictions."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder
    from sklearn.tree import DecisionTreeClassifier

    cats = [np.arange(s) for a, s in zip(train.domain.attributes, train.domain.shape) if a != label]
    xt, yt = ml._xy(holdout, label, None, rng)
    out, preds = {}, {}
    for name, make in [("lr", lambda: LogisticRegression(max_iter=300)),
                       ("dt", lambda: DecisionTreeClassifier(max_depth=10, random_state=0))]:
        for side, data in [("synthetic", synthetic), ("real", train)]:
            x, y = ml._xy(data, label, max_train, rng)
            if len(np.unique(y)) < 2:
                pred = np.full(yt.shape, y[0] if y.size else 0)
            else:
                model = make_pipeline(OneHotEncoder(categories=cats, handle_unknown="ignore"), make())
                pred = model.fit(x, y).predict(xt)
            preds[f"{name}_{side}"] = pred
            out[f"{name}_accuracy_{side}"] = float(accuracy_score(yt, pred))
            out[f"{name}_f1_{side}"] = float(f1_score(yt, pred, average="macro"))
    return out, preds


def numpy_predictions(train, holdout, synthetic, label, max_train, rng):
    from vertisynth.plugins.evaluators.models import LogisticModel, TreeModel

    j = train.domain.axes([label])[0]
    sizes = [s for i, s in enumerate(train.domain.shape) if i != j]
    xt, yt = ml._xy(holdout, label, None, rng)
    preds = {}
    for name in ["lr", "dt"]:
        for side, data in [("synthetic", synthetic), ("real", train)]:
            x, y = ml._xy(data, label, max_train, rng)
            if len(np.unique(y)) < 2:
                preds[f"{name}_{side}"] = np.full(yt.shape, y[0] if y.size else 0)
            elif name == "lr":
                preds[f"{name}_{side}"] = LogisticModel().fit(x, sizes, y).predict(xt)
            else:
                preds[f"{name}_{side}"] = TreeModel(10).fit(x, sizes, y, train.domain.shape[j]).predict(xt)
    return preds


def tables(dataset: str, synthesizer: str, eps: float, seed: int):
    """One run's (training rows, holdout, synthetic table), captured from the evaluator's call."""
    captured = {}

    def capture(self, train, holdout, synthetic, rng):
        captured.update(train=train, holdout=holdout, synthetic=synthetic, label=self._label)
        return {}

    name, _, preset = dataset.partition(":")
    ds = {"name": name, **({"params": {"preset": preset, "seed": seed}} if preset else {})}
    label = LABELS.get(name)
    cfg = parse_config({"seed": seed, "budget": {"epsilon": eps, "delta": 1e-5}, "dataset": ds,
                        "synthesizer": {"use": synthesizer}, "evaluation": {"holdout": 0.2},
                        "evaluators": [{"use": "ml_utility", "params": {"label": label} if label else {}}]})
    original = ml.MLUtility.evaluate_holdout
    ml.MLUtility.evaluate_holdout = capture
    try:
        run(cfg)
    finally:
        ml.MLUtility.evaluate_holdout = original
    return captured


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="census,adult,nltcs,zoo:mixed,zoo:strong")
    ap.add_argument("--synthesizers", default="vertimrf,independent")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--eps", type=float, default=1.0)
    args = ap.parse_args()
    imp = subprocess.run([sys.executable, "-c", "import resource, time; t = time.process_time(); "
                          "import sklearn.linear_model, sklearn.tree, sklearn.metrics, sklearn.pipeline, "
                          "sklearn.preprocessing; print(time.process_time() - t)"],
                         capture_output=True, text=True, check=True)
    print(f"importing scikit-learn's models: {float(imp.stdout):.2f} CPU s (a fresh interpreter, numpy loaded)")
    keys = [f"{m}_{s}_{side}" for m in ("lr", "dt") for s in ("accuracy", "f1") for side in ("synthetic", "real")]
    print(f"{'dataset':<12} {'synth':<11} {'seed':>4}  " + " ".join(f"{k:>22}" for k in keys)
          + "  agree lr/dt (synthetic, real)   CPU s sklearn → numpy")
    cpu = {"sklearn": [], "numpy": []}
    for dataset in args.datasets.split(","):
        for synthesizer in args.synthesizers.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                t = tables(dataset, synthesizer, args.eps, seed)
                ev = ml.MLUtility(ml.MLUtilityConfig(label=t["label"]))
                ev._label = t["label"]
                c0 = time.process_time()
                new = ev.evaluate_holdout(t["train"], t["holdout"], t["synthetic"], np.random.default_rng(seed))
                c1 = time.process_time()
                old, old_pred = sklearn_ml_utility(t["train"], t["holdout"], t["synthetic"], t["label"],
                                                   ev.config.max_train, np.random.default_rng(seed))
                c2 = time.process_time()
                cpu["numpy"].append(c1 - c0)
                cpu["sklearn"].append(c2 - c1)
                new_pred = numpy_predictions(t["train"], t["holdout"], t["synthetic"], t["label"],
                                             ev.config.max_train, np.random.default_rng(seed))
                agree = " ".join(f"{np.mean(old_pred[k] == new_pred[k]):.4f}"
                                 for k in ("lr_synthetic", "lr_real", "dt_synthetic", "dt_real"))
                print(f"{dataset:<12} {synthesizer:<11} {seed:>4}  "
                      + " ".join(f"{old[k]:>10.4f} → {new[k]:<9.4f}" for k in keys)
                      + f"  {agree}   {c2 - c1:.2f} → {c1 - c0:.2f}", flush=True)
    print(f"median CPU s of one evaluation (import excluded): scikit-learn {statistics.median(cpu['sklearn']):.2f}, "
          f"numpy {statistics.median(cpu['numpy']):.2f}")


if __name__ == "__main__":
    main()
