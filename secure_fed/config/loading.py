"""From TOML and command-line overrides to one validated tree, each problem in the operator's words."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from secure_fed.config.run import RunConfig


class ConfigError(ValueError):
    """A configuration problem, with every offending key named."""


def _sections(model: type[BaseModel] = RunConfig, prefix: str = "") -> dict[str, type[BaseModel]]:
    """Every section of the tree by its dotted name ("" for the top), nested ones included."""
    found = {prefix: model}
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            found |= _sections(sub, f"{prefix}.{name}" if prefix else name)
    return found


def _did_you_mean(loc: tuple[int | str, ...]) -> str:
    """The nearest known key to an unknown one: a close spelling in the same section, else the same
    name in another section (a key put under the wrong header); "" when nothing is near."""
    import difflib

    *parents, leaf = (str(p) for p in loc)
    sections = _sections()
    here = sections.get(".".join(parents))
    if here is not None:
        close = difflib.get_close_matches(leaf, list(here.model_fields), n=1, cutoff=0.75)
        if close:
            return f" (did you mean {'.'.join([*parents, close[0]])}?)"
    elsewhere = [name for name, model in sections.items() if leaf in model.model_fields]
    if len(elsewhere) == 1:
        return f" (did you mean {elsewhere[0] + '.' if elsewhere[0] else ''}{leaf}?)"
    return ""


# pydantic's bounds, in the words of the fix: (what is wrong, how to set it, ctx key)
_BOUNDS = {
    "greater_than": ("too small", "above", "gt"),
    "greater_than_equal": ("too small", "to at least", "ge"),
    "less_than": ("too large", "below", "lt"),
    "less_than_equal": ("too large", "to at most", "le"),
}
# pydantic's type errors: what the value is not, and what to set
_KINDS = {
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "path_type": "a path",
}


def _shown(value: Any) -> str:
    """A value as the operator wrote it in TOML, cut short where it is long."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:g}"
    else:
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _problem(e: Any) -> str:
    """One pydantic error in our words: the value given, what is wrong with it, what to set instead
    (never the library's "Input should be …", which names neither the value nor the fix)."""
    kind, ctx, given = e["type"], e.get("ctx") or {}, _shown(e.get("input"))
    if kind == "extra_forbidden":
        return "unknown key" + _did_you_mean(e["loc"])
    if kind in _BOUNDS:
        wrong, how, bound = _BOUNDS[kind]
        return f"{given} is {wrong}; set it {how} {_shown(ctx[bound])}"
    if kind == "finite_number":
        return f"{given} is not a finite number; set a number (inf and nan would switch its check off)"
    if kind == "literal_error":
        return f"{given} is not allowed; set one of {str(ctx['expected']).replace(' or ', ', ')}"
    if kind in _KINDS:
        return f"{given} is not {_KINDS[kind]}; set {_KINDS[kind]}"
    if kind in ("model_type", "dict_type"):
        section = ".".join(str(p) for p in e["loc"])
        return f"{given} is not a table; write it as a [{section}] table"
    if kind == "missing":
        return "is required; set it"
    msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return msg.replace("Input should be", f"{given} must be", 1)


def _describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = _problem(e)
        # a check across keys names its keys itself ("dp.budget_epsilon = 4 is below …")
        named = msg.startswith(f"{key}.") or msg.startswith(f"{key} ")
        lines.append(msg if key == "<root>" or named else f"{key}: {msg}")
    return "\n".join(lines)


def build_config(data: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read TOML (if given), apply dotted-key overrides, validate the whole tree once."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            # utf-8-sig: Windows editors start a UTF-8 file with a byte-order mark, which TOML rejects
            data = tomllib.loads(Path(path).read_text(encoding="utf-8-sig"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such config file") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: {err}") from None
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return build_config(data)
