"""Components: how an option of a config group becomes an object, and the one check of its settings.

Every option of ``qkv_sharing``, ``pos_enc``, ``norm``, ``ffn``, ``init`` and ``task`` names what
implements it by import path under Hydra's ``_target_`` key; every other key is a *setting*,
passed to it as a keyword argument::

    # conf/qkv_sharing/gqa.yaml
    _target_: ablate.model.attention.GQA
    name: gqa          # the label records and tables show (optional: the option's file name)
    kv_heads: 2        # -> GQA(d_model, n_heads, dropout=..., bias=..., kv_heads=2)

Built-in options and a user's own (``_target_: my_lab.attention.TalkingHeads``) take the same
path: :func:`resolve` imports the target, :func:`settings_problems` checks the settings against
the target's signature (unknown, missing and wrongly typed keys, from its type hints), and the
target's own ``problems`` classmethod, when it has one, checks what only it knows. The contract
of each kind (what the assembler passes and calls) lives with its base class, in the file of its
concern; ``ablate.config`` runs the checks of every group before anything trains.

Type hints are the schema. Plain ``int``, ``float``, ``bool``, ``str``, ``list[int]``, ``X | None``
and ``Literal[...]`` are checked as written; ranges ride along with ``typing.Annotated``::

    def __init__(self, d_model: int, n_heads: int, kv_heads: PositiveInt = 2, ...)
"""

from __future__ import annotations

import collections.abc
import functools
import importlib
import inspect
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal, Mapping, Union

#: keys of an option node that are not settings of its target
RESERVED = ("_target_", "name")


@dataclass(frozen=True)
class Range:
    """A numeric range for ``Annotated[int | float, Range(...)]``; open or closed at each end."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def problem(self, value: float) -> str | None:
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        return f"must be {self}" if too_low or too_high else None

    def __str__(self) -> str:
        def number(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {number(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {number(self.high)}")
        return " and ".join(parts)


POSITIVE = Range(low=0, low_open=True)
NON_NEGATIVE = Range(low=0)
PositiveInt = Annotated[int, POSITIVE]
NonNegativeInt = Annotated[int, NON_NEGATIVE]
PositiveFloat = Annotated[float, POSITIVE]
NonNegativeFloat = Annotated[float, NON_NEGATIVE]
Fraction = Annotated[float, Range(0, 1, high_open=True)]  # [0, 1): dropout, a held-out share


@dataclass(frozen=True)
class Context:
    """What a model component may know besides its own settings: the model it goes into."""

    d_model: int
    n_heads: int
    n_layers: int
    causal: bool
    max_len: int  # the longest sequence it will see (training and evaluation)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class ComponentError(ValueError):
    """An option whose target cannot be used; the message names the group and the target."""


# ---------------------------------------------------------------------------------------------
# resolving a target

def target_path(node: Mapping[str, Any]) -> str | None:
    value = node.get("_target_")
    return value if isinstance(value, str) and value else None


def import_target(path: str) -> Any:
    """The object at a dotted import path (``package.module.Name`` or ``package.module.Outer.Inner``)."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as error:
            if error.name and ".".join(parts[:cut]).startswith(error.name):
                continue  # a shorter module path may hold the rest as attributes
            raise
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    return importlib.import_module(path)


def resolve(group: str, node: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(target, settings) of an option node; raises ComponentError naming the group and path."""
    path = target_path(node)
    if path is None:
        raise ComponentError(f"{group}._target_={node.get('_target_')!r} must be the import path of the class "
                             "that implements the option (a string such as my_lab.attention.MyAttention)")
    try:
        target = import_target(path)
    except Exception as error:  # noqa: BLE001 - any import failure is a config problem
        raise ComponentError(f"{group}._target_={path!r} cannot be imported: "
                             f"{type(error).__name__}: {error}") from None
    return target, settings_of(node, target)


def label_problems(group: str, node: Mapping[str, Any]) -> list[str]:
    """A ``name`` that cannot be a label (it must be a string), whatever the target."""
    name = node.get("name")
    if name is None or isinstance(name, str):
        return []
    return [f"{group}.name={name!r} must be a string (the label records and tables show)"]


def settings_of(node: Mapping[str, Any], target: Any) -> dict[str, Any]:
    """The keyword arguments of a node: all keys but ``_target_``, and ``name`` unless the target
    takes a ``name`` itself (``task=glue task.name=sst2``)."""
    takes_name = "name" in _parameters(target)
    return {k: v for k, v in node.items() if k != "_target_" and (k != "name" or takes_name)}


def label(node: Mapping[str, Any], default: str | None = None) -> str:
    """The name records and tables show for an option: ``name``, else ``default``, else the class name."""
    name = node.get("name")
    if isinstance(name, str) and name:
        return name
    return default or (target_path(node) or "?").rsplit(".", 1)[-1]


def describe(target: Any) -> str:
    """The first line of a target's docstring (what ``ablate --list`` shows)."""
    doc = inspect.getdoc(target) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def qualname(target: Any) -> str:
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"


# ---------------------------------------------------------------------------------------------
# checking settings against a signature

def _callable_of(target: Any) -> Callable[..., Any]:
    return target.__init__ if inspect.isclass(target) else target


def _parameters(target: Any) -> dict[str, inspect.Parameter]:
    try:
        params = dict(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return {}
    return params


def _hints(target: Any) -> dict[str, Any]:
    """``target``'s type hints, resolved once per target (every job's validation asks for them; resolving
    the string annotations is a tenth of a validation). Read-only for callers."""
    try:
        return _resolved_hints(target)
    except TypeError:  # an unhashable callable: resolved each time
        return _resolved_hints.__wrapped__(target)


@functools.lru_cache(maxsize=512)
def _resolved_hints(target: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(_callable_of(target), include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable hints (a user's forward references): no type checks
        return {}


def settings_problems(group: str, target: Any, settings: Mapping[str, Any],
                      passed: Mapping[str, Any] | None = None) -> list[str]:
    """Problems of ``settings`` for ``target``: keys it does not take, required keys missing, values
    of the wrong type or out of range. ``passed``: what the assembler itself passes (never
    checked as settings, but it must bind)."""
    passed = dict(passed or {})
    if not inspect.isclass(target) and not callable(target):
        return [f"{group}: {qualname(target)} is not callable"]
    who = qualname(target)
    try:
        signature = inspect.signature(target)
        signature.bind_partial(**passed)
    except (TypeError, ValueError) as error:
        return [f"{group}: {who} does not take the arguments the assembler passes "
                f"({', '.join(passed) or 'none'}): {error}; see the contract of {group} in docs/extending.md"]
    params = signature.parameters
    problems: list[str] = []
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = {n: p for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    own = [n for n in named if n not in passed]
    for key in settings:
        if key in passed:
            problems.append(f"{group}.{key} is set by the model itself ({key}={passed[key]!r}); remove it")
        elif key not in named and not var_kw:
            problems.append(f"{group}.{key} is not a setting of {who}; valid: {', '.join(own) or '(none)'}")
    for key, param in named.items():
        if param.default is param.empty and key not in passed and key not in settings:
            problems.append(f"{group}.{key} is required by {who}")
    if not problems:
        try:
            signature.bind(**passed, **settings)
        except TypeError as error:
            problems.append(f"{group}: {who} cannot take these settings: {error}")
    hints = _hints(target)
    for key, value in settings.items():
        if key in named and key in hints and key not in passed:
            problem = value_problem(value, hints[key])
            if problem:
                problems.append(f"{group}.{key}={value!r} {problem}")
    return problems


def type_problems(group: str, target: Any, settings: Mapping[str, Any]) -> list[str]:
    """Only the type and range checks of :func:`settings_problems`, for the keys present (used
    when the model's shape is itself broken, so the component cannot be built to check more)."""
    hints = _hints(target)
    out = []
    for key, value in settings.items():
        problem = value_problem(value, hints[key]) if key in hints else None
        if problem:
            out.append(f"{group}.{key}={value!r} {problem}")
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def value_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` does not fit the type hint (``"must be a positive integer"``), or None."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        base, *extras = args
        problem = value_problem(value, base)
        if problem:
            ranges = [e for e in extras if isinstance(e, Range)]
            return problem + (f" {ranges[0]}" if ranges else "")
        for extra in extras:
            if isinstance(extra, Range) and _number(value):
                problem = extra.problem(value)
                if problem:
                    return problem
        return None
    if hint is Any or hint is inspect.Parameter.empty or hint is object:
        return None
    if origin in (Union, types.UnionType):
        if any(value_problem(value, a) is None for a in args):
            return None
        return f"must be {type_name(hint)}"
    if origin is Literal:
        return None if value in args else f"must be one of {', '.join(repr(a) for a in args)}"
    if hint is type(None):
        return None if value is None else "must be null"
    if hint is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if hint is int:
        return None if _is_int(value) else "must be an integer"
    if hint is float:
        if not _number(value):
            return "must be a number"
        return None if math.isfinite(value) else "must be a finite number"
    if hint is str:
        return None if isinstance(value, str) else "must be a string"
    if origin in (list, tuple, collections.abc.Sequence) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return f"must be {type_name(hint)}"
        if origin is tuple:
            item = args[0] if len(args) == 2 and args[1] is Ellipsis else None
        else:
            item = args[0] if args else None
        if item is not None:
            for element in value:
                if value_problem(element, item):
                    return f"must be {type_name(hint)}"
        return None
    if origin in (dict, collections.abc.Mapping) or hint is dict:
        return None if isinstance(value, Mapping) else "must be a mapping"
    if inspect.isclass(hint):
        return None if isinstance(value, hint) else f"must be {type_name(hint)}"
    return None  # a hint this checker does not know: accepted


def type_name(hint: Any) -> str:
    """A type hint in words: ``a positive integer``, ``a list of integers``, ``null or a number``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        base, *extras = args
        ranges = [str(e) for e in extras if isinstance(e, Range)]
        return f"{type_name(base)}{' ' + ranges[0] if ranges else ''}"
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple, collections.abc.Sequence):
        return f"a list of {_plural(type_name(args[0]))}" if args else "a list"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
             type(None): "null", list: "a list", tuple: "a list", dict: "a mapping"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _plural(name: str) -> str:
    """``an integer > 0`` -> ``integers > 0``."""
    for article in ("an ", "a "):
        if name.startswith(article):
            first, _, rest = name[len(article):].partition(" ")
            return f"{first}s {rest}".strip()
    return name


def call_problems(group: str, target: Any, fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``fn`` (a dry build or forward of a component); any exception becomes one problem that
    names the group and the target, never a traceback."""
    try:
        return fn(), []
    except Exception as error:  # noqa: BLE001 - whatever a component raises is reported, not raised
        return None, [f"{group}: {qualname(target)} raised {type(error).__name__}: {error}"]


def _key_of(problem: str) -> str:
    return problem.split()[0].split("=")[0].rstrip(":") if problem else ""


def merge_problems(first: list[str], second: list[str]) -> list[str]:
    """``first``, then the problems of ``second`` about keys ``first`` does not already name."""
    named = {_key_of(p) for p in first}
    return first + [p for p in second if _key_of(p) not in named]


def own_problems(group: str, target: Any, settings: Mapping[str, Any], context: Any) -> list[str]:
    """The target's own ``problems(settings, context)`` classmethod, when it has one."""
    fn = getattr(target, "problems", None)
    if not callable(fn):
        return []
    found, error = call_problems(group, target, lambda: list(fn(settings, context) or []))
    return error or found


def shape_problem(group: str, target: Any, call: str, result: Any, expected: tuple[int, ...]) -> list[str]:
    """A problem when ``result`` is not a tensor of shape ``expected``."""
    shape = getattr(result, "shape", None)
    if shape is not None and tuple(shape) == tuple(expected):
        return []
    got = tuple(shape) if shape is not None else type(result).__name__
    return [f"{group}: {qualname(target)}.{call} must return shape {tuple(expected)}; got {got}"]


#: what a built component may report about itself, each a number: its method -> what the number is
REPORTED_NUMBERS = {"flops": "forward FLOPs per token", "layer_flops": "forward FLOPs per token of each layer"}


def reported_problems(group: str, target: Any, module: Any, context: Any) -> list[str]:
    """The numbers a built component reports about itself (:data:`REPORTED_NUMBERS`, at the
    model's longest length and a batch of 2): each must be a finite number >= 0, since the
    records' FLOPs, budgets and MFU are sums of them. A method that raises is a problem too."""
    out = []
    for method, what in REPORTED_NUMBERS.items():
        fn = getattr(module, method, None)
        if not callable(fn) or context is None:
            continue
        value, problems = call_problems(group, target, lambda: fn(context.max_len, 2))
        problem = None if problems else value_problem(value, NonNegativeFloat)
        out += problems + ([f"{group}: {qualname(target)}.{method}(seq_len={context.max_len}, batch_size=2) "
                            f"returned {value!r} ({what}); expected a finite number >= 0 (docs/extending.md, "
                            "FLOPs)"] if problem else [])
    return out


def check_module(group: str, target: Any, settings: Mapping[str, Any], passed: Mapping[str, Any],
                 context: Any, probe: Callable[[Any], list[str]] | None = None) -> list[str]:
    """The common part of every module contract: settings, the target's own ``problems``, a build
    on the meta device (no memory, no compute) that must give an ``nn.Module``, then ``probe``
    (forward calls and their output shapes, also on meta tensors) and the numbers it reports
    about itself (:func:`reported_problems`)."""
    import torch

    problems = merge_problems(settings_problems(group, target, settings, passed),
                              own_problems(group, target, settings, context))
    if problems:
        return problems
    with torch.device("meta"):
        module, problems = call_problems(group, target, lambda: target(**passed, **settings))
        if problems:
            return problems
        if not isinstance(module, torch.nn.Module):
            return [f"{group}: {qualname(target)} must build a torch.nn.Module, got {type(module).__name__}"]
        found, problems = call_problems(group, target, lambda: probe(module)) if probe else ([], [])
        if problems or found:
            return problems or list(found)
        return reported_problems(group, target, module, context)
