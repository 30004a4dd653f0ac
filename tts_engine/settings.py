"""`cadence serve`'s settings file: a TOML file whose tables map onto the engine's config dataclasses.

    [server]     -> server.config.ServerConfig       (listen address, request and connection limits)
    [scheduler]  -> scheduler.config.SchedulerConfig (admission caps, deadlines, codec tick, lookahead)
    [engine]     -> EngineSettings                   (numerics and process settings of the engine)

A key is a field name; a field left out keeps its default; an unknown table or key, or a value of the
wrong type, is a one-line error naming the file and the key. `cadence serve --show-config` prints every
table with its defaults. The fast path's kernel choices are not settings: runtime/options.py holds them.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .runtime.options import CODEC_PRECISIONS
from .scheduler.config import SchedulerConfig
from .server.config import ServerConfig


@dataclass(frozen=True)
class EngineSettings:
    # Codec numerics: fp32 is exact; tf32 keeps fp32 weights on tensor-core convs; bf16 is what the
    # official package computes when loaded in bf16, its documented use. None: bf16 on CUDA, fp32 on CPU.
    codec_precision: str | None = None
    # Positions each slot's KV cache holds (prompt plus speech frames): the longest stream. 2,048 holds
    # the speech of ~1,480 characters; each 1,024 more hold ~760 more and, for the 1.7B model's 64
    # slots, take ~7.5 GB more GPU memory. Text beyond what fits is refused up front (422 text_too_long).
    # docs/performance.md's figures are at 2,048 (decode attention splits its keys by this length).
    max_context: int = 2048
    # After warm-up, everything then alive is exempt from cyclic GC, whose full collections otherwise
    # pause the engine thread for 0.1-0.2 s (engine/gcpause.py).
    gc_freeze: bool = True
    # Python's thread switch interval: how long the engine thread may wait for the GIL while the
    # server's event loop runs Python (Python's own default, 5 ms, is longer than a frame step).
    gil_switch_ms: float = 0.5
    # With --profile-engine: how long the engine thread is profiled.
    profile_seconds: float = 30.0

    def validate(self) -> EngineSettings:
        if self.codec_precision not in (None, *CODEC_PRECISIONS):
            raise ValueError(f"codec_precision must be one of {', '.join(CODEC_PRECISIONS)}, "
                             f"got {self.codec_precision!r}")
        if not 64 <= self.max_context <= 32768:
            raise ValueError(f"max_context must be in 64-32768, got {self.max_context}")
        if not self.gil_switch_ms > 0:
            raise ValueError(f"gil_switch_ms must be > 0, got {self.gil_switch_ms}")
        if not self.profile_seconds > 0:
            raise ValueError(f"profile_seconds must be > 0, got {self.profile_seconds}")
        return self


@dataclass(frozen=True)
class ServeSettings:
    server: ServerConfig = field(default_factory=ServerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    engine: EngineSettings = field(default_factory=EngineSettings)


TABLES = {"server": ServerConfig, "scheduler": SchedulerConfig, "engine": EngineSettings}


def _accepts(annotation: str, value) -> tuple[bool, object]:
    """Whether a TOML value fits a field's annotation (a string under `from __future__ import
    annotations`), and the value as the field holds it (arrays become tuples)."""
    kinds = {part.strip().split("[")[0] for part in annotation.split("|")}
    if isinstance(value, bool):
        return "bool" in kinds, value
    if isinstance(value, int):
        return bool(kinds & {"int", "float"}), float(value) if "int" not in kinds else value
    if isinstance(value, float):
        return "float" in kinds, value
    if isinstance(value, str):
        return "str" in kinds, value
    if isinstance(value, list):
        return bool(kinds & {"tuple", "list"}), tuple(value) if "tuple" in kinds else value
    return False, value


def build(cls, table: dict, where: str):
    """One dataclass from one TOML table, validated."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in table.items():
        if key not in fields:
            raise ValueError(f"{where}: unknown setting {key!r} (known: {', '.join(fields)})")
        ok, value = _accepts(str(fields[key].type), value)
        if not ok:
            raise ValueError(f"{where}.{key}: expected {fields[key].type}, got {type(value).__name__} {value!r}")
        values[key] = value
    obj = cls(**values)
    try:
        return obj.validate()
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def load(path: Path | None, overrides: dict[str, dict] | None = None) -> ServeSettings:
    """Settings from defaults, the file at `path`, then `overrides` ({table: {key: value}}; None values
    are left unset), each table validated."""
    data: dict = {}
    if path is not None:
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path}: {e}") from None
        for name, table in data.items():
            if name not in TABLES:
                raise ValueError(f"{path}: unknown table [{name}] (known: {', '.join(f'[{t}]' for t in TABLES)})")
            if not isinstance(table, dict):
                raise ValueError(f"{path}: {name} must be a table ([{name}])")
    parts = {}
    for name, cls in TABLES.items():
        table = dict(data.get(name, {}))
        table.update({k: v for k, v in (overrides or {}).get(name, {}).items() if v is not None})
        parts[name] = build(cls, table, f"{path or 'settings'} [{name}]")
    return ServeSettings(**parts)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def defaults_toml() -> str:
    """Every table and key with its default, as a TOML file (`cadence serve --show-config`). A field
    whose default is None (unset: for most, chosen by the device at start) is shown commented out: TOML
    has no null."""
    lines = ["# cadence serve --config FILE.toml: every setting with its default (docs/streaming-api.md)."]
    for name, cls in TABLES.items():
        lines += ["", f"[{name}]"]
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            if default is None:
                lines.append(f"# {f.name} =  # unset by default ({f.type})")
            else:
                lines.append(f"{f.name} = {_toml_value(default)}")
    return "\n".join(lines) + "\n"
