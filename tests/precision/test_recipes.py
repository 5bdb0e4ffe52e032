"""The ``recipes`` search: each recipe's all-int8 plan measured, the best kept for the searches after it."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from rlcompile import runtimes
from rlcompile.precision.api import recipe_quantizers
from rlcompile.precision.contract import Samples, relative_l2
from rlcompile.precision.evaluate import Evaluator
from rlcompile.precision.searches import create
from rlcompile.precision.searches.recipes import best_recipe, recipe_modes
from rlcompile.precision.space import DEFAULT_RECIPE, RECIPES, Mode, PrecisionPlan, Recipe, precision_units
from rlcompile.runtimes.ort import run_proto_on_each
from tests.precision.builders import outlier_block, outlier_samples


def test_the_fastest_recipe_within_tolerance_else_the_least_error_goes_on_to_the_searches_after_it(tmp_path):
    proto, groups = outlier_block()
    units = precision_units(proto, groups)
    assert [unit.residuals for unit in units] == [("join",), ("residual",)]
    calibration, validation = outlier_samples(16), outlier_samples(8, seed=1)
    samples = Samples(calibration, validation, "outliers", ["x"])
    make = recipe_quantizers(proto, units, calibration, tmp_path)
    created = {name: runtimes.create(name) for name in ("ort", "openvino")}
    reference = run_proto_on_each(proto, validation)
    evaluator = Evaluator(units, make(DEFAULT_RECIPE), created, samples, relative_l2, reference, 0.0, 0.5, 1,
                          grouped=SimpleNamespace(groups=groups), quantizer_factory=make)  # fmt: skip
    modes = [Mode("ort"), Mode("openvino")]
    create("uniform")(evaluator, modes, 0)
    result = create("recipes")(evaluator, modes, 0)
    every = frozenset(range(len(units)))
    usable = [recipe for recipe in RECIPES if not recipe.attention]  # the block has no attention
    tried = {"ort": usable, "openvino": usable}  # each sets ranges at run time its own way
    assert result.evaluations == len(tried["ort"]) + len(tried["openvino"]) == len(result.notes["errors"])
    for runtime, recipes in tried.items():
        errors = {recipe: evaluator.cache[PrecisionPlan(Mode(runtime, recipe=recipe), every)].error
                  for recipe in (DEFAULT_RECIPE, *recipes)}  # fmt: skip
        assert errors[Recipe(smoothing=0.8, residuals=False)] < errors[DEFAULT_RECIPE], runtime
        chosen = next(mode.recipe for mode in recipe_modes(evaluator, modes) if mode.runtime == runtime)
        plans = {recipe: evaluator.cache[PrecisionPlan(Mode(runtime, recipe=recipe), every)] for recipe in errors}
        within = [e for e in plans.values() if e.within]
        assert within  # the tolerance (0.5) takes some: the fastest of them goes on
        assert all(e.screened_ms is not None for e in within)  # timed in turns, not by one brief block each
        assert plans[chosen].ranking_ms == min(e.ranking_ms for e in within)
        outside = [replace(e, within=False) for e in plans.values()]  # none within: the least error goes on
        assert errors[best_recipe(outside)] == min(errors.values())
    assert PrecisionPlan(Mode("openvino", recipe=chosen)) == PrecisionPlan(Mode("openvino"))  # a float plan is any's
    assert (tmp_path / "int8-minmax-smooth0.8" / "calibration.json").exists()  # each recipe calibrates in its folder
    evaluator.close()


def test_a_recipe_with_the_attention_in_int8_is_measured_in_each_float_mode_of_the_runtime():
    from rlcompile.precision.searches.recipes import recipe_runs

    modes = [Mode("ort"), Mode("openvino"), Mode("openvino", "bf16")]
    smooth, attention = RECIPES[0], replace(RECIPES[0], attention=True)
    assert recipe_runs(modes[2], smooth, modes) == [modes[2]]  # the fastest all-int8 mode alone
    assert recipe_runs(modes[2], attention, modes) == modes[1:]
    dynamic = Recipe(calibration="dynamic")
    assert recipe_runs(modes[2], dynamic, modes) == [modes[2]]  # OpenVINO sets the ranges of int8 weights' MatMuls
    assert recipe_runs(Mode("tvm"), dynamic, [Mode("tvm")]) == []  # no kernels for ranges at run time
    assert attention in RECIPES and attention.label == "SmoothQuant 0.8, residual Adds in float, attention in int8"
