"""What a substitution rule is: a pattern, a condition and a replacement, applied at one location.

A :class:`Rule` lists its locations in a graph (deterministic, graph order) and applies itself at one
of them to a *copy* of the graph. Two kinds share the interface: :class:`StructuralRule`, written
against ``onnx_ir`` for patterns with several consumers of one value (parallel branches), and
:class:`PatternRule`, which wraps an ``onnxscript`` ``RewriteRule`` (single-output DAG patterns) and
applies it at the chosen node only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import onnx_ir as ir
from onnxscript.rewriter import pattern

from rlcompile.errors import RlcompileError
from rlcompile.graph import onnx_graph


class RuleError(RlcompileError):
    """A rule was asked to apply where it does not match."""


@dataclass(frozen=True, order=True)
class Location:
    """Where a rule applies: the names of the nodes it rewrites (the anchor first)."""

    nodes: tuple[str, ...]

    def describe(self) -> str:
        return " + ".join(self.nodes)


class Rule(ABC):
    """A semantics-preserving substitution with a stable id and a one-line description."""

    id: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def locations(self, model: ir.Model) -> list[Location]:
        """Every place the rule applies, in graph order."""

    @abstractmethod
    def rewrite(self, model: ir.Model, location: Location) -> None:
        """Rewrite ``model`` in place at ``location``; raise :class:`RuleError` if it does not match."""

    def apply(self, model: ir.Model, location: Location) -> ir.Model:
        """A rewritten copy of ``model``, which it remembers as its parent; ``model`` itself is left intact."""
        rewritten = onnx_graph.clone(model)
        self.rewrite(rewritten, location)
        onnx_graph.set_parent(rewritten, model)
        return rewritten

    def __repr__(self) -> str:
        return f"<rule {self.id}>"


class StructuralRule(Rule):
    """A rule whose match is a tuple of nodes found by :meth:`matches` and replaced by :meth:`replace`."""

    @abstractmethod
    def matches(self, graph: ir.Graph) -> list[tuple[ir.Node, ...]]:
        """Every match, in graph order."""

    @abstractmethod
    def replace(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[ir.Node]:
        """Build the replacement, rewire the uses, return the nodes it made dead."""

    def locations(self, model: ir.Model) -> list[Location]:
        return [Location(tuple(node.name for node in match)) for match in self.matches(model.graph)]

    def rewrite(self, model: ir.Model, location: Location) -> None:
        by_name = onnx_graph.nodes_by_name(model.graph)
        nodes = tuple(by_name.get(name) for name in location.nodes)
        if None in nodes or nodes not in set(self.matches_at(model.graph, nodes)):
            raise RuleError(f"rule {self.id} does not apply at {location.describe()}")
        onnx_graph.finish(model.graph, self.replace(model.graph, nodes))

    def matches_at(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> list[tuple[ir.Node, ...]]:
        """The matches that could equal ``nodes`` (all of them unless a rule narrows the scan)."""
        return self.matches(graph)


class PatternRule(Rule):
    """An ``onnxscript`` rewrite rule applied at one anchor node (the pattern's output node)."""

    def __init__(self, rule: pattern.RewriteRule) -> None:
        self.rule = rule

    def locations(self, model: ir.Model) -> list[Location]:
        return [Location((node.name,)) for node in list(model.graph) if self.matches_at(model, node)]

    def matches_at(self, model: ir.Model, node: ir.Node) -> bool:
        """Whether the rule rewrites at ``node``, leaving ``model`` as it was.

        ``try_rewrite`` builds the replacement nodes, which read the graph's values; they are detached
        again so the graph's use lists stay exact.
        """
        delta = self.rule.try_rewrite(model, model.graph, node)
        if delta is None:
            return False
        for new_node in delta.new_nodes:
            for index in range(len(new_node.inputs)):
                new_node.replace_input_with(index, None)
        return True

    def rewrite(self, model: ir.Model, location: Location) -> None:
        graph = model.graph
        node = onnx_graph.nodes_by_name(graph).get(location.nodes[0])
        delta = None if node is None else self.rule.try_rewrite(model, graph, node)
        if delta is None:
            raise RuleError(f"rule {self.id} does not apply at {location.describe()}")
        for initializer in delta.new_initializers:
            initializer.name = onnx_graph.unique_name(graph, initializer.name or "weight")
            if initializer.const_value is not None:
                initializer.const_value.name = initializer.name
            graph.register_initializer(initializer)
        for new_node in delta.new_nodes:
            new_node.name = onnx_graph.unique_name(graph, new_node.op_type)
        ir.convenience.replace_nodes_and_values(
            graph, node, delta.match.nodes, delta.new_nodes, delta.match.outputs, delta.new_outputs
        )
        onnx_graph.finish(graph)
