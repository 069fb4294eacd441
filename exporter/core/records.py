"""Frozen records built in one call: `quick_init`, a faster `__init__` for the judgement's frozen dataclasses.

A frozen dataclass's generated `__init__` stores each field with `object.__setattr__(self, name, value)` (its
own `__setattr__` refuses): ~1,400 instructions a field, against ~100 for an ordinary store. The records the
judgement builds every scrape have up to 50 fields each (issue #20: ~0.28 M of 3.2 M instructions per scrape at
1x). `quick_init` gives such a class an `__init__` with the same signature (positional and keyword-only
parameters, defaults, default factories) that hands the instance its whole `__dict__` in one call: the same
attributes in the same order, still frozen, equal, hashed and printed by the dataclass's own methods.

Used on every record the judgement builds per scrape (pipeline/derive.py, profile.py, inputs.py, verdict.py,
replicas.py, report.py). No library makes frozen dataclasses without the per-field store: dataclasses itself
generates its `__init__` the same way (exec of source made of the field names), and attrs' frozen classes pay the same
`object.__setattr__` per field.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


class _Factory:
    """The default of a parameter whose field has a default factory (as the dataclass's own marker)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def quick_init(cls: type[T]) -> type[T]:
    """`cls` (a frozen dataclass with a `__dict__`, every field in `__init__`, no `__post_init__`) with the
    `__init__` described above."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    params = getattr(cls, "__dataclass_params__", None)
    if (params is None or not params.frozen or "__slots__" in vars(cls) or hasattr(cls, "__post_init__")
            or not all(f.init for f in fields) or any(f.name.startswith("_quick_") for f in fields)):
        raise TypeError(f"{cls.__name__}: quick_init takes a frozen dataclass without slots, __post_init__ or "
                        "fields left out of __init__")
    ns: dict[str, Any] = {"_quick_set": object.__setattr__, "_quick_factory": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            ns[f"_quick_default_{f.name}"] = f.default
            param = f"{f.name}=_quick_default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"_quick_make_{f.name}"] = f.default_factory
            param = f"{f.name}=_quick_factory"
            body.append(f"    if {f.name} is _quick_factory:\n        {f.name} = _quick_make_{f.name}()\n")
        else:
            param = f.name
        (keyword if f.kw_only else positional).append(param)
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    values = ", ".join(f"{f.name!r}: {f.name}" for f in fields)
    source = f"def __init__({signature}):\n{''.join(body)}    _quick_set(self, '__dict__', {{{values}}})\n"
    exec(source, ns)  # the source is made of the class's own field names
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
