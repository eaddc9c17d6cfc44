"""The part of PromQL the shipped dashboards use, evaluated over the console's own scrapes.

Without a Prometheus the console still draws every chart from the same expression text as
the Grafana dashboards: selectors with matchers and ranges, ``rate``, ``increase``,
``histogram_quantile``, ``sum``/``max``/``min``/``avg`` with ``by``/``without``, and
arithmetic between vectors (``on``/``ignoring``, ``group_left``) and numbers. ``rate`` and
``increase`` extrapolate to the window's edges as Prometheus does, so both sources agree.
Anything else is refused by name, never guessed at.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ferryman_server.admin_ui.series import windows
from ferryman_server.kernel.scrape import quantile

Labels = tuple[tuple[str, str], ...]
"""Sorted (name, value) pairs; ``__name__`` included while a series still has its name."""
Vector = dict[Labels, float]
Scrape = tuple[float, dict[str, dict[Labels, float]]]
"""(unix time, metric name -> each of its series' value then)."""


@dataclass(frozen=True)
class Columns:
    """Scrapes by series: ``metrics[name][labels][i]`` is that series' value at ``times[i]``
    (NaN where a scrape lacked it). Columns of floats keep a day of history small."""

    times: Sequence[float]
    metrics: Mapping[str, Mapping[Labels, Sequence[float]]]
    generation: int = 0
    """Moves when past columns were rewritten (thinned): results for past instants change."""

    @staticmethod
    def from_scrapes(scrapes: Sequence[Scrape]) -> Columns:
        metrics: dict[str, dict[Labels, list[float]]] = {}
        for i, (_, found) in enumerate(scrapes):
            for name, series in found.items():
                for labels, value in series.items():
                    column = metrics.setdefault(name, {}).setdefault(labels, [math.nan] * len(scrapes))
                    column[i] = value
        return Columns([t for t, _ in scrapes], metrics)


LOOKBACK_S = 300.0
"""How far back an instant selector looks for a sample (Prometheus' default)."""
AGGREGATIONS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "max": max,
    "min": min,
    "avg": lambda values: sum(values) / len(values),
}
ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b if b else (math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)),
}
TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)|(?P<duration>\[\d+(?:ms|s|m|h|d)\])"
    r"|(?P<string>\"(?:[^\"\\]|\\.)*\")|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"|(?P<op>=~|!~|!=|[-+*/(){},=]))"
)
DURATION_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class PromQLError(ValueError):
    """An expression outside the subset, or not an expression at all."""


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def matches(self, labels: dict[str, str]) -> bool:
        have = labels.get(self.label, "")
        if self.op in ("=", "!="):
            return (have == self.value) == (self.op == "=")
        return bool(re.fullmatch(self.value, have)) == (self.op == "=~")


@dataclass(frozen=True)
class Selector:
    matchers: tuple[Matcher, ...]
    range_s: float | None


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Node, ...]


@dataclass(frozen=True)
class Aggregate:
    op: str
    labels: tuple[str, ...]
    without: bool
    inner: Node


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node
    on: tuple[str, ...] | None
    ignoring: tuple[str, ...]
    group_left: bool


Node = float | Selector | Call | Aggregate | Binary


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text.rstrip()):
            m = TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise PromQLError(f"cannot read {text[pos : pos + 20]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.at = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> str:
        kind, text = self.peek()
        if kind == "end" or (value is not None and text != value):
            raise PromQLError(f"expected {value or 'more'}, found {text or 'the end'}")
        self.at += 1
        return text

    def labels(self) -> tuple[str, ...]:
        self.take("(")
        names: list[str] = []
        while self.peek()[1] != ")":
            names.append(self.take())
            if self.peek()[1] == ",":
                self.take(",")
        self.take(")")
        return tuple(names)

    def expression(self, level: int = 0) -> Node:
        operators = (("+", "-"), ("*", "/"))
        if level == len(operators):
            return self.unary()
        left = self.expression(level + 1)
        while self.peek()[1] in operators[level]:
            op = self.take()
            on: tuple[str, ...] | None = None
            ignoring: tuple[str, ...] = ()
            if self.peek()[1] in ("on", "ignoring"):
                which = self.take()
                names = self.labels()
                on, ignoring = (names, ()) if which == "on" else (None, names)
            group_left = self.peek()[1] == "group_left"
            if group_left:
                self.take()
                if self.peek()[1] == "(":
                    self.labels()  # extra labels copied from the one side: none are used
            right = self.expression(level + 1)
            left = Binary(op, left, right, on, ignoring, group_left)
        return left

    def unary(self) -> Node:
        kind, text = self.peek()
        if kind == "number":
            self.take()
            return float(text)
        if text == "(":
            self.take("(")
            inner = self.expression()
            self.take(")")
            return inner
        if kind != "ident":
            raise PromQLError(f"unexpected {text!r}")
        self.take()
        if text in AGGREGATIONS:
            labels, without = self._grouping()
            self.take("(")
            inner = self.expression()
            self.take(")")
            if not labels:
                labels, without = self._grouping()
            return Aggregate(text, labels, without, inner)
        if text in ("rate", "increase", "histogram_quantile"):
            self.take("(")
            args = [self.expression()]
            while self.peek()[1] == ",":
                self.take(",")
                args.append(self.expression())
            self.take(")")
            return Call(text, tuple(args))
        if self.peek()[1] == "(":
            raise PromQLError(f"the console does not evaluate {text}()")
        return self._selector(text)

    def _grouping(self) -> tuple[tuple[str, ...], bool]:
        if self.peek()[1] in ("by", "without"):
            without = self.take() == "without"
            return self.labels(), without
        return (), False

    def _selector(self, name: str) -> Selector:
        matchers = [Matcher("__name__", "=", name)]
        if self.peek()[1] == "{":
            self.take("{")
            while self.peek()[1] != "}":
                label, op = self.take(), self.take()
                kind, value = self.peek()
                if kind != "string" or op not in ("=", "!=", "=~", "!~"):
                    raise PromQLError(f"bad matcher on {label}")
                self.take()
                matchers.append(Matcher(label, op, bytes(value[1:-1], "utf-8").decode("unicode_escape")))
                if self.peek()[1] == ",":
                    self.take(",")
            self.take("}")
        range_s = None
        if self.peek()[0] == "duration":
            m = re.fullmatch(r"\[(\d+)(ms|s|m|h|d)\]", self.take())
            assert m is not None
            range_s = float(m.group(1)) * DURATION_S[m.group(2)]
        return Selector(tuple(matchers), range_s)


def parse(text: str) -> Node:
    parser = _Parser(text)
    node = parser.expression()
    if parser.peek()[0] != "end":
        raise PromQLError(f"unexpected {parser.peek()[1]!r}")
    return node


def _without_name(labels: Labels) -> Labels:
    return tuple(p for p in labels if p[0] != "__name__")


class Evaluator:
    """Evaluates parsed expressions at given times over columns of scrapes. Selectors are
    evaluated for all of ``instants`` (a range query's) at their first use, one pass per
    series (``windows``); an instant outside them is evaluated alone."""

    def __init__(self, columns: Columns, instants: Sequence[float] = ()) -> None:
        self.columns = columns
        self._instants = list(instants)
        self._planned = set(self._instants)
        self._times = np.asarray(columns.times, dtype=np.float64)
        self._by_instant: dict[Selector | Call, dict[float, Vector]] = {}
        self._groups: dict[Aggregate, dict[Labels, Labels]] = {}

    def _series(self, selector: Selector) -> tuple[list[Labels], list[Sequence[float]]]:
        """The selector's series: their labels and their columns."""
        name, rest = selector.matchers[0].value, selector.matchers[1:]
        matched = [
            (labels, column)
            for labels, column in self.columns.metrics.get(name, {}).items()
            if all(m.matches(dict(labels)) for m in rest)
        ]
        return [labels for labels, _ in matched], [column for _, column in matched]

    def _at(self, node: Selector | Call, t: float) -> Vector:
        """``node`` (a selector, or rate/increase of one) at ``t``."""
        known = self._by_instant.setdefault(node, {})
        if t in known:
            return known[t]
        instants = self._instants if t in self._planned else [t]
        found: dict[float, Vector] = {at: {} for at in instants}
        selector = node if isinstance(node, Selector) else node.args[0]
        assert isinstance(selector, Selector)  # the caller checked
        reach = LOOKBACK_S if selector.range_s is None else selector.range_s
        # Only the scrapes the instants' windows reach: a redraw reads a few, not a day.
        lo, hi = np.searchsorted(self._times, (min(instants) - reach, max(instants)), side="right").tolist()
        labels, columns = self._series(selector)
        if not isinstance(node, Selector):
            labels = [_without_name(one) for one in labels]
        when, times, first_row = np.asarray(instants, dtype=np.float64), self._times[lo:hi], 0
        for block in windows.blocks(columns, lo, hi) if hi > lo else []:
            if isinstance(node, Selector):
                has, got = windows.latest(times, block, when, reach)
            else:
                has, got = windows.extrapolated(times, block, when, reach, node.function == "rate")
            rows, ats = np.nonzero(has)
            for row, k, value in zip(rows.tolist(), ats.tolist(), got[has].tolist(), strict=True):
                found[instants[k]][labels[first_row + row]] = value
            first_row += len(block)
        known.update(found)
        return known[t]

    def vector(self, node: Node, t: float) -> Vector | float:
        if isinstance(node, float):
            return node
        if isinstance(node, Selector):
            if node.range_s is not None:
                raise PromQLError("a range selector needs rate() or increase()")
            return self._at(node, t)
        if isinstance(node, Call):
            return self._call(node, t)
        if isinstance(node, Aggregate):
            return self._aggregate(node, t)
        return self._binary(node, t)

    def _call(self, node: Call, t: float) -> Vector:
        if node.function == "histogram_quantile":
            q, inner = self.vector(node.args[0], t), self.vector(node.args[1], t)
            if not isinstance(q, float) or isinstance(inner, float):
                raise PromQLError("histogram_quantile(number, vector)")
            groups: dict[Labels, dict[float, float]] = {}
            for labels, value in inner.items():
                le = dict(labels).get("le")
                if le is not None:
                    rest = tuple(p for p in labels if p[0] != "le")
                    groups.setdefault(rest, {})[float(le)] = value
            return {labels: quantile(buckets, q) for labels, buckets in groups.items()}
        (arg,) = node.args
        if not isinstance(arg, Selector) or arg.range_s is None:
            raise PromQLError(f"{node.function}() takes a range selector")
        return self._at(node, t)

    def _aggregate(self, node: Aggregate, t: float) -> Vector:
        inner = self.vector(node.inner, t)
        if isinstance(inner, float):
            raise PromQLError(f"{node.op} takes a vector")
        keys = self._groups.setdefault(node, {})  # the same series at every instant
        groups: dict[Labels, list[float]] = {}
        for labels, value in inner.items():
            key = keys.get(labels)
            if key is None:
                if node.without:
                    key = tuple(p for p in _without_name(labels) if p[0] not in node.labels)
                else:
                    key = tuple(p for p in labels if p[0] in node.labels)
                keys[labels] = key
            groups.setdefault(key, []).append(value)
        return {key: AGGREGATIONS[node.op](values) for key, values in groups.items()}

    def _binary(self, node: Binary, t: float) -> Vector | float:
        op = ARITHMETIC[node.op]
        left, right = self.vector(node.left, t), self.vector(node.right, t)
        if isinstance(left, float) and isinstance(right, float):
            return op(left, right)
        if isinstance(right, float):
            assert not isinstance(left, float)
            return {_without_name(k): op(v, right) for k, v in left.items()}
        if isinstance(left, float):
            return {_without_name(k): op(left, v) for k, v in right.items()}

        def key(labels: Labels) -> Labels:
            plain = _without_name(labels)
            if node.on is not None:
                return tuple(p for p in plain if p[0] in node.on)
            return tuple(p for p in plain if p[0] not in node.ignoring)

        by_key: dict[Labels, float] = {}
        for labels, value in right.items():
            if key(labels) in by_key:
                raise PromQLError("many series on the right side of a binary operation")
            by_key[key(labels)] = value
        out: Vector = {}
        for labels, value in left.items():
            match = key(labels)
            if match in by_key:
                result = _without_name(labels) if node.group_left else match
                out[result] = op(value, by_key[match])
        return out


def instant(evaluator: Evaluator, node: Node, t: float) -> dict[Labels, float]:
    """The expression's series at ``t``, NaN left out (a gap, as in Prometheus)."""
    result = evaluator.vector(node, t)
    if isinstance(result, float):
        result = {(): result}
    return {labels: value for labels, value in result.items() if not math.isnan(value)}


def evaluate(
    expression: str, data: Columns | Sequence[Scrape], times: Sequence[float]
) -> dict[Labels, list[tuple[float, float]]]:
    """Each series of ``expression`` at each of ``times``: what a range query returns."""
    node = parse(expression)
    evaluator = Evaluator(data if isinstance(data, Columns) else Columns.from_scrapes(data), times)
    out: dict[Labels, list[tuple[float, float]]] = {}
    for t in times:
        for labels, value in instant(evaluator, node, t).items():
            out.setdefault(labels, []).append((t, value))
    return out
