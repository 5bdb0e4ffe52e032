"""What each group's int8 kernels save, from the runtimes' counters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlcompile.precision.quantize import Quantizer, placement_for
from tests.precision.builders import residual_block


def test_a_kernel_is_charged_to_the_group_that_holds_most_of_its_nodes():
    from types import SimpleNamespace

    from rlcompile.precision.savings import group_times

    groups = [SimpleNamespace(nodes=["conv1", "relu1"]), SimpleNamespace(nodes=["conv2", "add2"])]
    layers = [(frozenset({"conv1", "relu1", "conv2_QuantizeLinear"}), 1.0),
              (frozenset({"relu1", "conv2", "add2"}), 2.0), (frozenset({"x_QuantizeLinear"}), 5.0),
              (frozenset({"conv1", "conv2"}), 0.5)]  # fmt: skip
    np.testing.assert_allclose(group_times(layers, groups), [1.5, 2.0])  # a tie goes to the first group


@pytest.mark.parametrize("runtime", ["openvino", "ort"])
def test_what_each_group_saves_comes_from_the_runtimes_counters(tmp_path: Path, runtime: str):
    """OpenVINO's counters on the float and the all-int8 model price each unit's kernels; ONNX Runtime keeps none
    that this reads (the proxy then weighs the units by their MACs)."""
    from rlcompile.precision.savings import unit_savings
    from rlcompile.precision.space import precision_units
    from rlcompile.runtimes import RuntimeOptions, create

    proto, groups = residual_block()
    units = precision_units(proto, groups)
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 4, 8, 8)).astype(np.float32)} for i in range(4)]
    quantizer = Quantizer(proto, feeds, tmp_path)
    lowered = quantizer.quantized([name for unit in units for name in (*unit.nodes, *unit.companions)],
                                  placement_for(runtime))  # fmt: skip
    library = create(runtime)
    saved = unit_savings(library, proto, lowered, groups, units, feeds[0], RuntimeOptions(1, exclusive=True))
    if runtime == "ort":
        assert saved is None
        return
    assert saved.shape == (len(units),) and np.all(np.isfinite(saved))
    exact, _ = library.layer_times([proto, lowered], feeds[0], RuntimeOptions(1, exclusive=True), rounds=5)
    assert any("conv1" in names for names, _ in exact) and all(ms >= 0 for _, ms in exact)
