"""The action space of the graph level: every (rule, location) pair that applies to a graph.

Locations come in graph order, at most :data:`MAX_LOCATIONS` per rule (the thesis's cap), so the
same graph always yields the same list, and an agent's action ``(rule index, location index)``
means the same rewrite every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx_ir as ir

from rlcompile.graph.rules import Location, Rule

MAX_LOCATIONS = 200


@dataclass(frozen=True)
class Candidate:
    """One applicable rewrite."""

    rule: Rule
    location: Location

    def apply(self, model: ir.Model) -> ir.Model:
        return self.rule.apply(model, self.location)

    def describe(self) -> str:
        return f"{self.rule.id} @ {self.location.describe()}"


def locations_per_rule(model: ir.Model, rules: Sequence[Rule], cap: int = MAX_LOCATIONS) -> list[list[Location]]:
    """For each rule (same order), its first ``cap`` locations in graph order."""
    return [rule.locations(model)[:cap] for rule in rules]


def candidates(model: ir.Model, rules: Sequence[Rule], cap: int = MAX_LOCATIONS) -> list[Candidate]:
    """Every applicable rewrite, rule by rule, locations in graph order."""
    per_rule = locations_per_rule(model, rules, cap)
    return [Candidate(rule, location) for rule, found in zip(rules, per_rule, strict=True) for location in found]
