"""Where a TrainConfig comes from: its defaults, then a YAML file, then flags (or Python keyword options); and where
it goes (the run's config.yaml, from which the run can be repeated)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import yaml

from ..data.files import write_atomic
from ..errors import ArgumentParser, DiskgnnError, UsageError, closest
from .config import TrainConfig


_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def _convert(name: str, value, where: str):
    """A YAML or flag value as the field's type."""
    kind = _FIELDS[name].type
    if value is None:
        if "None" in kind:
            return None
        raise UsageError(f"{where}: {name.replace('_', '-')} cannot be empty")
    try:
        if kind.startswith("bool"):
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "yes", "1", "on"):
                return True
            if str(value).lower() in ("false", "no", "0", "off"):
                return False
            raise ValueError(value)
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {name.replace('_', '-')}: cannot read {value!r} as {kind.split(' ')[0]}") from None


def load_yaml(path) -> dict:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise DiskgnnError(f"{path}: cannot read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of option: value")
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in _FIELDS:
            raise UsageError(f"{path}: unknown option {key!r}"
                             + closest(str(key), [n.replace("_", "-") for n in _FIELDS]))
        if isinstance(value, dict):
            raise UsageError(f"{path}: {key}: expected a value, got a mapping")
        out[name] = _convert(name, value, f"{path}: {key}")
    return out


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m diskgnn.train",
                       description="Plans, samples, packs and trains a GNN out of core.")
    p.add_argument("--config", metavar="FILE.yaml", help="options from a YAML file (flags override it)")
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type.startswith("bool"):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=f.metadata["help"])
        else:
            # Choices are checked by validate() (a YAML value needs the same check), so one message serves both.
            shown = "" if f.default is None else f" (default: {f.default})"
            p.add_argument(flag, default=None, help=f"{f.metadata['help']}{shown}", metavar=f.name.upper())
    return p


def resolve(argv=None) -> TrainConfig:
    """Defaults, overridden by --config FILE, overridden by the flags given."""
    args = parser().parse_args(argv)
    values = load_yaml(args.config) if args.config else {}
    for name in _FIELDS:
        given = getattr(args, name)
        if given is not None:
            values[name] = _convert(name, given, "--" + name.replace("_", "-"))
    config = TrainConfig(**values)
    config.validate()
    return config


def from_options(**options) -> TrainConfig:
    """Defaults, overridden by Python keyword options (the flags' names in snake case; fanouts also as a list),
    validated as the flags are."""
    values = {}
    for key, value in options.items():
        name = key.replace("-", "_")
        if name not in _FIELDS:
            raise UsageError(f"unknown option {key!r}" + closest(key, list(_FIELDS)))
        values[name] = _convert(name, value, f"option {name}")
    config = TrainConfig(**values)
    config.validate()
    return config


def save(config: TrainConfig, path: Path) -> None:
    text = yaml.safe_dump({k.replace("_", "-"): v for k, v in config.to_dict().items()}, sort_keys=False)
    write_atomic(path, text.encode())
