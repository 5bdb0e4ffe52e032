"""Each group's sensitivity from one probe run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from rlcompile.models import load_model
from rlcompile.precision.quantize import Quantizer, placement_for
from tests.precision.builders import conv_relu_conv, residual_block


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
@pytest.mark.parametrize("build", [residual_block, conv_relu_conv])
def test_the_probe_measures_each_group_lowered_alone_where_it_is_lowered(tmp_path: Path, runtime: str, build):
    """One probe run gives, for every unit, what quantizing that unit alone does to its own output: the same
    deviation as the model with only that unit in int8, read at the unit's convolution (never another unit's
    error with it: the second convolution reads the float Relu's output though ONNX Runtime's all-int8 model
    computes it in the first convolution)."""
    from onnx import helper

    from rlcompile.precision.sensitivity import local_deviations
    from rlcompile.precision.space import precision_units
    from rlcompile.runtimes.ort import run_proto_on_each

    proto, groups = build()
    units = precision_units(proto, groups)
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 4, 8, 8)).astype(np.float32)} for i in range(4)]
    quantizer = Quantizer(proto, feeds, tmp_path)
    probed = local_deviations(quantizer, units, placement_for(runtime), feeds)

    def at_output(model: onnx.ModelProto, node_name: str) -> list[np.ndarray]:
        """The node's own output (ONNX Runtime's quantizer renames it when it quantizes it)."""
        name = next(node for node in model.graph.node if node.name == node_name).output[0]
        model.graph.output.append(helper.make_empty_tensor_value_info(name))
        return [outputs[-1] for outputs in run_proto_on_each(model, feeds)]

    for unit, deviation in zip(units, probed, strict=True):
        exact = at_output(onnx.load_from_string(proto.SerializeToString()), unit.nodes[0])
        alone = at_output(quantizer.quantized(unit.nodes, placement_for(runtime)), unit.nodes[0])
        expected = np.mean([np.linalg.norm(q - f) / np.linalg.norm(f) for q, f in zip(alone, exact, strict=True)])
        assert 0 < deviation == pytest.approx(expected, rel=1e-4)


def test_the_probe_runs_on_a_whole_model(tmp_path: Path):
    from rlcompile.layer.group_table import group_model
    from rlcompile.precision.sensitivity import local_deviations
    from rlcompile.precision.space import precision_units

    grouped = group_model(load_model("lenet5"))
    feeds = [{"input": np.random.default_rng(i).standard_normal((1, 1, 32, 32)).astype(np.float32)} for i in range(4)]
    units = precision_units(grouped.proto, grouped.groups)
    deviations = local_deviations(Quantizer(grouped.proto, feeds, tmp_path), units, placement_for("openvino"), feeds)
    assert len(deviations) == len(units) >= 4 and np.all((deviations > 0) & (deviations < 0.1))
