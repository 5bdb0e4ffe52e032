"""Kernel search strategies behind one interface, created by name: ``strategies.create("sa", seed=1)``."""

from __future__ import annotations

from rlcompile.errors import RlcompileError, check_choice
from rlcompile.kernel.strategies.annealing import SimulatedAnnealing
from rlcompile.kernel.strategies.base import Proposal, SearchContext, SearchStrategy
from rlcompile.kernel.strategies.droplet import DropletSearch
from rlcompile.kernel.strategies.evolutionary import EvolutionarySearch
from rlcompile.kernel.strategies.random import RandomSearch
from rlcompile.kernel.strategies.rl import Chameleon, PPOSearch

__all__ = ["STRATEGIES", "Proposal", "SearchContext", "SearchStrategy", "create", "parse_spec"]

STRATEGIES: dict[str, type[SearchStrategy]] = {
    cls.name: cls for cls in (RandomSearch, SimulatedAnnealing, EvolutionarySearch, DropletSearch, PPOSearch, Chameleon)
}


#: Strategies whose batch can be chosen by adaptive sampling from their search trajectory.
SAMPLING_STRATEGIES = ("sa", "rl", "chameleon")


def parse_spec(spec: str) -> tuple[str, dict]:
    """How benchmarks name ablations: ``name[+sampling][/option=value...]``.

    ``"sa+adaptive"`` -> ``("sa", {"sampling": "adaptive"})``;
    ``"chameleon/candidates=trajectory"`` -> ``("chameleon", {"candidates": "trajectory"})``;
    whole numbers become ints. A malformed option is an :class:`RlcompileError`.
    """
    head, *pairs = spec.split("/")
    name, _, sampling = head.partition("+")
    options: dict = {"sampling": sampling} if sampling else {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not key or not equals:
            raise RlcompileError(f"bad strategy option {pair!r} in {spec!r}; write option=value")
        options[key.replace("-", "_")] = int(value) if value.isdigit() else value
    return name, options


def create(name: str, seed: int = 0, **options) -> SearchStrategy:
    """Instantiate a strategy by name with its options."""
    check_choice("strategy", name, STRATEGIES)
    cls = STRATEGIES[name]
    if "sampling" in options and name not in SAMPLING_STRATEGIES:
        raise RlcompileError(f"--sampling applies to {', '.join(SAMPLING_STRATEGIES)}, not {name}")
    try:
        return cls(seed=seed, **options)
    except (TypeError, ValueError) as error:
        raise RlcompileError(f"bad option for strategy {name}: {error}") from None
