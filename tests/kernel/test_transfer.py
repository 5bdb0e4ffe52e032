"""Warm start: measurements of one task train the cost model of another task of the same structure."""

from __future__ import annotations

import numpy as np
import pytest

from rlcompile.errors import RlcompileError
from rlcompile.kernel import strategies
from rlcompile.kernel.cost_model import KnobXGB
from rlcompile.kernel.space import KnobSpace
from rlcompile.kernel.tasks import ConvShape
from rlcompile.kernel.transfer import WarmStart, decision_features, space_signature
from rlcompile.kernel.tuner import Tuner
from rlcompile.kernel.workdir import WorkDir
from tests.kernel.conftest import SMALL_CONV, copy_work_dir, make_task, tune_context

OTHER_CONV = ConvShape(1, 32, 7, 7, 64, (3, 3), (1, 1), (1, 1, 1, 1))


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory, target, measurer):
    """A work directory with 16 measurements of SMALL_CONV."""
    path = tmp_path_factory.mktemp("source")
    task = make_task(SMALL_CONV, target)
    Tuner([task], lambda: strategies.create("random", seed=1), WorkDir(path, "llvm"), measurer,
          trials=16, batch_size=8).run()  # fmt: skip
    return path


def test_decision_features_line_up_across_conv_shapes(target) -> None:
    small = KnobSpace.for_task(tune_context(make_task(SMALL_CONV, target)))
    other = KnobSpace.for_task(tune_context(make_task(OTHER_CONV, target, "other")))
    assert space_signature(small) == space_signature(other)
    assert small.sizes.tolist() != other.sizes.tolist()  # different domains, same decision layout
    rng = np.random.default_rng(0)
    features = [decision_features(s, [s.random_config(rng)]) for s in (small, other)]
    assert features[0].shape == features[1].shape


def test_warm_started_model_ranks_an_unseen_shape_before_its_first_measurement(source_dir, target) -> None:
    warm = WarmStart.load([source_dir], target, "llvm")
    assert warm.samples == 16
    space = KnobSpace.for_task(tune_context(make_task(OTHER_CONV, target, "other")))
    prior = warm.prior_for(space)
    assert prior is not None and prior.tasks == 1 and 0 < prior.labels.max() <= 1
    model = KnobXGB(space, seed=0, prior=prior)
    assert model.trained
    configs = [space.random_config(np.random.default_rng(i)) for i in range(20)]
    predictions = model.predict(configs)
    assert predictions.std() > 0  # a ranking, not the untrained model's noise
    cold = KnobXGB(space, seed=0)
    assert not cold.trained


def test_tuner_uses_the_warm_start_and_reports_it(source_dir, target, tmp_path, measurer) -> None:
    task = make_task(OTHER_CONV, target, "other")
    warm = WarmStart.load([source_dir], target, "llvm")
    state = Tuner([task], lambda: strategies.create("sa", seed=0), WorkDir(tmp_path, "llvm"), measurer,
                  trials=8, batch_size=8, warm_start=warm).run()[0]  # fmt: skip
    assert state.trials == 8 and state.summary()["warm_start_samples"] == 16


def test_records_of_another_machine_or_no_work_dir_are_refused(source_dir, target, tmp_path) -> None:
    foreign = tmp_path / "foreign"
    copy_work_dir(source_dir, foreign, cpu="Another CPU")
    with pytest.raises(RlcompileError, match=r"--warm-start: work dir .* cpu='Another CPU'"):
        WarmStart.load([foreign], target, "llvm")
    with pytest.raises(RlcompileError, match="not a tuning work directory"):
        WarmStart.load([tmp_path / "empty"], target, "llvm")


def small_rl():
    return strategies.create("rl", seed=0, episodes=8, max_steps=20)


def test_rl_agent_is_kept_per_task_and_starts_a_task_of_the_same_structure(target, tmp_path, measurer) -> None:
    import torch

    source = make_task(SMALL_CONV, target)
    Tuner([source], small_rl, WorkDir(tmp_path / "source", "llvm"), measurer, trials=16,
          batch_size=8).run()  # fmt: skip
    saved = torch.load(tmp_path / "source" / "agents" / f"{source.workload_key}.pt", weights_only=True)
    assert saved["strategy"] == "rl" and saved["trials"] == 16

    warm = WarmStart.load([tmp_path / "source"], target, "llvm")
    tuner = Tuner([make_task(OTHER_CONV, target, "other")], small_rl, WorkDir(tmp_path / "target", "llvm"),
                  measurer, trials=8, batch_size=8, warm_start=warm)  # fmt: skip
    state = tuner.states[0]
    tuner.prepare(state)
    started = state.strategy.network.state_dict()
    assert all(torch.equal(started[name], value) for name, value in saved["state"]["network"].items())

    cold = Tuner([make_task(OTHER_CONV, target, "other")], small_rl, WorkDir(tmp_path / "cold", "llvm"),
                 measurer, trials=8, batch_size=8)  # fmt: skip
    cold.prepare(cold.states[0])
    fresh = cold.states[0].strategy.network.state_dict()
    assert not all(torch.equal(fresh[name], value) for name, value in saved["state"]["network"].items())
