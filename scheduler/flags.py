"""Command-line flags generated from a settings dataclass: each field's type,
default, choices and help (from its metadata) make one flag (a tuple field, a
repeatable one), so that every command
taking a setting shows it alike, and parsed flags or settings go back and forth."""
from __future__ import annotations

import argparse
import types
import typing
from dataclasses import fields


class OneLineErrors(argparse.ArgumentParser):
    """A parser (and its subcommands) that refuses bad flags with one line naming
    the command, as the commands refuse settings that cannot go together."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def add_flags(group, cls, names: list[str] | None = None, *,
              absent_unless_given: bool = False) -> None:
    """A `--flag` for each field of the dataclass `cls` named in `names` (all by
    default). `absent_unless_given`: a flag not given leaves no attribute, so that
    only the flags given count (its help still shows the default)."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if names is not None and f.name not in names:
            continue
        kind = _plain(hints[f.name])
        help_text = f"{f.metadata['help']} (default: {_shown(f.default)})".replace("%", "%%")
        options = {"help": help_text,
                   "default": argparse.SUPPRESS if absent_unless_given else f.default}
        if kind is bool:
            if f.default:
                raise TypeError(f"{cls.__name__}.{f.name}: a flag can only turn a setting on")
            options["action"] = "store_true"
        elif kind is tuple:  # a repeatable flag: argparse appends to a list of its own
            options["action"] = "append"
            options["default"] = argparse.SUPPRESS
        else:
            options["type"] = kind
            if "choices" in f.metadata:
                options["choices"] = f.metadata["choices"]
        group.add_argument(flag(f.name), dest=f.name, **options)


def given(args: argparse.Namespace, cls, names: list[str] | None = None) -> dict:
    """The fields of `cls` named in `names` (all by default) that `args` holds."""
    return {f.name: getattr(args, f.name) for f in fields(cls)
            if hasattr(args, f.name) and (names is None or f.name in names)}


def as_argv(settings, names: list[str] | None = None) -> list[str]:
    """The flags that give `settings` on a command line made by `add_flags`: those
    of the fields named in `names` (all by default) that differ from their defaults."""
    argv = []
    for f in fields(settings):
        value = getattr(settings, f.name)
        if (names is not None and f.name not in names) or value == f.default:
            continue
        if value is True:
            argv.append(flag(f.name))
        elif isinstance(value, tuple):
            argv += [part for each in value for part in (flag(f.name), each)]
        else:
            argv += [flag(f.name), str(value)]
    return argv


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _plain(hint) -> type:
    """`int` for `int | None`, `tuple` for `tuple[str, ...]`."""
    if isinstance(hint, types.UnionType):
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return typing.get_origin(hint) or hint


def _shown(default) -> str:
    if default is None:
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, tuple):
        return ", ".join(default) or "none"
    return str(default)


def positive(text: str) -> float:
    """An option's value that must be a number above 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value
