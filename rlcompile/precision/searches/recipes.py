"""``recipes``: how to quantize, before which groups to: each recipe's all-int8 plan, per runtime, measured.

For each runtime with int8 groups, the mode whose all-int8 plan ran fastest (``uniform`` measured it) is measured again
under every recipe of :data:`~rlcompile.precision.space.RECIPES` that changes its model (SmoothQuant where a MatMul has
constant weights, residual Adds in float where a group has one, ...). :func:`recipe_modes` then gives the searches after
it each runtime's modes with the recipe of its fastest all-int8 plan within the tolerance, or, where none is, of the one
with the least error: with fewer groups to return to float, the other searches find faster plans within it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from rlcompile.precision.evaluate import Evaluation, Evaluator
from rlcompile.precision.quantize import DYNAMIC, placement_for, quantized_at_run_time
from rlcompile.precision.searches.base import SearchResult, all_int8, run_plans
from rlcompile.precision.smoothing import smoothable
from rlcompile.precision.space import DEFAULT_RECIPE, RECIPES, Mode, PrecisionPlan, Recipe

#: The runtimes whose own kernels run ranges set at run time: ONNX Runtime fuses DynamicQuantizeLinear and
#: MatMulInteger into DynamicQuantizeMatMul; OpenVINO quantizes the activations of a MatMul with int8 weights itself
#: (:attr:`~rlcompile.precision.quantize.Placement.sets_ranges_itself`; ONNX Runtime's dynamic model it ran slower than
#: its own fp32 run of the float model).
DYNAMIC_RUNTIMES = ("ort", "openvino")


def recipes(evaluator: Evaluator, modes: list[Mode], seed: int) -> SearchResult:
    """Each runtime's fastest all-int8 mode under each recipe that changes its model."""
    if not evaluator.units:
        return SearchResult("recipes", None, 0, {"skipped": "no group can run in int8"})
    tried = [recipe for recipe in RECIPES if changes(evaluator, recipe)]
    dynamic = dynamic_runtimes(evaluator)
    plans = [PrecisionPlan(replace(mode, recipe=recipe), all_int8(evaluator))
             for fastest in fastest_per_runtime(evaluator, modes) for recipe in tried
             for mode in recipe_runs(fastest, recipe, modes, dynamic)]  # fmt: skip
    result = run_plans("recipes", evaluator, plans)
    result.notes["errors"] = {plan.mode.label: evaluator.cache[plan].error for plan in plans if plan in evaluator.cache}
    screened = screen_within(evaluator, plans)
    if screened:
        result.best = min((e for e in screened if e.plan in plans), key=lambda e: e.ranking_ms, default=result.best)
        result.notes["screened_ms"] = {e.plan.mode.label: e.screened_ms for e in screened}
    return result


def screen_within(evaluator: Evaluator, plans: list[PrecisionPlan]) -> list[Evaluation]:
    """The all-int8 plans within the tolerance, ``plans`` and each runtime's default recipe's, timed in turns
    (:meth:`Evaluator.screen`) so that the recipe the searches after go on with is not chosen by one brief block each:
    on all-MiniLM-L6-v2 (2-core Zen 5) the recipes' all-int8 plans differ by 1-7% timed in turns, and their order
    changes with how contended the second core is. Returns them (none when fewer than two)."""
    defaults = [PrecisionPlan(replace(plan.mode, recipe=DEFAULT_RECIPE), plan.int8) for plan in plans]
    found = {plan: evaluator.cache.get(plan) for plan in [*defaults, *plans]}
    within = [e for e in found.values() if e is not None and e.within and e.failure is None]
    if len(within) < 2:
        return []
    evaluator.screen(within, evaluator.search_deadline)
    return within


def recipe_runs(fastest: Mode, recipe: Recipe, modes: list[Mode],
                dynamic: Collection[str] = DYNAMIC_RUNTIMES) -> list[Mode]:  # fmt: skip
    """The modes ``recipe`` is measured in: the runtime's fastest, or every one of the runtime's where the recipe
    quantizes the attention (whose float arithmetic it takes out of the float mode's hands: on all-MiniLM-L6-v2 the
    int8 attention gained more beside OpenVINO's fp32 arithmetic than beside its bf16); none where the runtime is not
    among ``dynamic``, those with kernels for the model's operators with ranges set at run time."""
    if recipe.calibration == DYNAMIC and fastest.runtime not in dynamic:
        return []
    if recipe.attention:
        return [mode for mode in modes if mode.runtime == fastest.runtime]
    return [fastest]


def dynamic_runtimes(evaluator: Evaluator) -> list[str]:
    """The runtimes of :data:`DYNAMIC_RUNTIMES` that quantize some of the model's int8 operators with ranges set at run
    time (OpenVINO its MatMuls, not a CNN's Gemm)."""
    anchors = [name for unit in evaluator.units for name in unit.nodes]
    return [runtime for runtime in DYNAMIC_RUNTIMES
            if quantized_at_run_time(evaluator.quantizer.original, anchors, placement_for(runtime))]  # fmt: skip


def changes(evaluator: Evaluator, recipe: Recipe) -> bool:
    """Whether ``recipe`` quantizes this model otherwise than the default does."""
    anchors = {name for unit in evaluator.units for name in unit.nodes}
    if recipe.smoothing and not smoothable(evaluator.quantizer.original, anchors):
        return False
    if not recipe.residuals and not any(unit.residuals for unit in evaluator.units):
        return False
    if recipe.calibration == DYNAMIC and not dynamic_runtimes(evaluator):
        return False
    if recipe.attention and not any(unit.attention for unit in evaluator.units):
        return False
    return recipe != DEFAULT_RECIPE


def fastest_per_runtime(evaluator: Evaluator, modes: list[Mode]) -> list[Mode]:
    """Per runtime, the mode whose all-int8 plan (default recipe) measured fastest (else whose float plan did), the
    runtime with the fastest plan first: where the budget stops the search, the runtime likeliest to win has its
    recipes."""
    best: dict[str, tuple[float, float, Mode]] = {}
    for mode in modes:
        plain = replace(mode, recipe=DEFAULT_RECIPE)
        lowered = evaluator.cache.get(PrecisionPlan(plain, all_int8(evaluator)))
        floats = evaluator.cache.get(PrecisionPlan(plain))
        key = (measured_ms(lowered), measured_ms(floats), plain)
        if mode.runtime not in best or key[:2] < best[mode.runtime][:2]:
            best[mode.runtime] = key
    return [mode for *_, mode in sorted(best.values(), key=lambda key: min(key[:2]))]


def measured_ms(evaluation: Evaluation | None) -> float:
    """An evaluation's brief time (infinite where it was not measured or failed)."""
    return evaluation.ms if evaluation is not None and evaluation.failure is None else float("inf")


def recipe_modes(evaluator: Evaluator, modes: list[Mode]) -> list[Mode]:
    """``modes`` with, per runtime, the recipe of its best all-int8 plan (:func:`best_recipe`; the default where no
    other was measured)."""
    chosen = {}
    for runtime in {mode.runtime for mode in modes}:
        measured = [e for plan, e in evaluator.cache.items() if plan.mode.runtime == runtime
                    and plan.int8 == all_int8(evaluator) and e.failure is None]  # fmt: skip
        chosen[runtime] = best_recipe(measured)
    return [replace(mode, recipe=chosen[mode.runtime]) for mode in modes]


def best_recipe(measured: list[Evaluation]) -> Recipe:
    """The recipe of the fastest all-int8 plan within the tolerance; where none is within it, of the one with the least
    error (the other searches then return the fewest groups to float); the default's on ties."""
    if not measured:
        return DEFAULT_RECIPE
    within = [e for e in measured if e.within]
    if within:
        best = min(within, key=lambda e: (e.ranking_ms, e.plan.mode.recipe != DEFAULT_RECIPE))
    else:
        best = min(measured, key=lambda e: (e.error, e.plan.mode.recipe != DEFAULT_RECIPE))
    return best.plan.mode.recipe
