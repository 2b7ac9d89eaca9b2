"""Built-in evaluators."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import EvaluatorSpec


@hookimpl
def vertisynth_evaluators():
    return [
        EvaluatorSpec("tvd", "vertisynth.plugins.evaluators.tvd:TVDEvaluator",
                      "vertisynth.plugins.evaluators.tvd:TVDConfig",
                      "average total variation distance over random k-way marginals",
                      {"symmetric"},  # tvd(real, synth) == tvd(synth, real): checked by vertisynth.testing
                      goal="minimize", min_value=0.0, max_value=1.0),
        EvaluatorSpec("ml_utility", "vertisynth.plugins.evaluators.ml:MLUtility",
                      "vertisynth.plugins.evaluators.ml:MLUtilityConfig",
                      "LR and decision-tree accuracy/macro-F1 on a real holdout, trained on synthetic vs real",
                      goal="maximize", min_value=0.0, max_value=1.0),
        EvaluatorSpec("svm_misclassification", "vertisynth.plugins.evaluators.ml:SVMMisclassification",
                      "vertisynth.plugins.evaluators.ml:SVMConfig",
                      "1 - accuracy of StandardScaler+SVC trained on synthetic, tested on a real holdout",
                      goal="minimize", min_value=0.0, max_value=1.0),
        EvaluatorSpec("workload_error", "vertisynth.plugins.evaluators.workload:WorkloadError",
                      "vertisynth.plugins.evaluators.workload:WorkloadConfig",
                      "normalised L1 error over a marginal workload (1-way by default)",
                      {"symmetric"}, goal="minimize", min_value=0.0, max_value=2.0),
        EvaluatorSpec("correlation", "vertisynth.plugins.evaluators.correlation:Correlation",
                      "vertisynth.plugins.evaluators.correlation:CorrelationConfig",
                      "pairwise Cramer's V / normalised MI differences, with a heatmap",
                      {"symmetric"}, goal="minimize", min_value=0.0, max_value=1.0),
        EvaluatorSpec("membership_attack", "vertisynth.plugins.evaluators.membership:MembershipAttack",
                      "vertisynth.plugins.evaluators.membership:MembershipAttackConfig",
                      "spectral attack AUC telling filled (PSU) or synthetic rows from real ones; 0.5 is ideal",
                      goal="minimize", min_value=0.5, max_value=1.0),
        # peer libraries' metrics, each under its own extra (skipped with a warning when it is absent)
        EvaluatorSpec("sdmetrics_quality", "vertisynth.plugins.evaluators.external:SDMetricsQuality", None,
                      "SDMetrics quality report on the raw tables: Column Shapes and Column Pair Trends (pip "
                      "install 'vertisynth[sdmetrics]')", {"raw_values"}, goal="maximize", min_value=0.0,
                      max_value=1.0),
        EvaluatorSpec("anonymeter_risk", "vertisynth.plugins.evaluators.external:AnonymeterRisk",
                      "vertisynth.plugins.evaluators.external:AnonymeterConfig",
                      "anonymeter singling-out / linkability / inference risk against a holdout (pip install "
                      "'vertisynth[anonymeter]')", goal="minimize", min_value=0.0, max_value=1.0),
    ]
