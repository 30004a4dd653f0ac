"""Sound devices by name or index, through sounddevice (PortAudio; Debian's `libportaudio2`)."""

from __future__ import annotations

from dataclasses import dataclass


class NoAudioDevice(ValueError):
    """No usable microphone or speaker (or no PortAudio at all): a user-facing error."""


def sounddevice():
    """The sounddevice module; NoAudioDevice when PortAudio itself is missing."""
    try:
        import sounddevice as sd
    except OSError as e:  # sounddevice raises OSError when it cannot load libportaudio
        raise NoAudioDevice(f"no audio: PortAudio is not installed ({e}); on Debian: apt-get install "
                            "libportaudio2") from None
    return sd


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    sample_rate: int  # the device's default rate: streams open at it, audio is resampled once
    channels: int  # of the kind asked for (input or output)


def list_devices() -> str:
    """Every device, one a line: index, in/out channels, default rate, name; defaults starred."""
    sd = sounddevice()
    devices = sd.query_devices()
    if not devices:
        return "no audio devices found"
    default_in, default_out = _defaults(sd)
    lines = []
    for i, d in enumerate(devices):
        star = ("<" if i == default_in else " ") + (">" if i == default_out else " ")
        lines.append(f"{star} {i:3d}  in {d['max_input_channels']:2d}  out {d['max_output_channels']:2d}  "
                     f"{int(d['default_samplerate']):6d} Hz  {d['name']}")
    return "\n".join([*lines, "(< default input, > default output)"])


def resolve(spec: str | int | None, kind: str) -> Device:
    """The `kind` ('input' or 'output') device named by `spec`: an index, a name (exact, else a
    unique case-insensitive substring), or None for the system default."""
    if kind not in ("input", "output"):
        raise ValueError(f"kind must be 'input' or 'output', got {kind!r}")
    sd = sounddevice()
    devices = list(sd.query_devices())
    key = f"max_{kind}_channels"
    if spec is None:
        index = _defaults(sd)[0 if kind == "input" else 1]
        if index is None:
            raise NoAudioDevice(f"no audio {kind} device: the system has no default {kind} "
                                f"({'microphone' if kind == 'input' else 'speaker'}); see --list-devices")
    elif isinstance(spec, int) or str(spec).strip().isdigit():
        index = int(spec)
        if not 0 <= index < len(devices):
            raise NoAudioDevice(f"no audio device with index {index} (there are {len(devices)}); see --list-devices")
    else:
        index = _by_name(devices, str(spec), key, kind)
    d = devices[index]
    if d[key] < 1:
        raise NoAudioDevice(f"audio device {index} ({d['name']}) has no {kind} channels")
    return Device(index=index, name=d["name"], sample_rate=int(d["default_samplerate"]), channels=int(d[key]))


def _by_name(devices: list, name: str, key: str, kind: str) -> int:
    usable = [(i, d["name"]) for i, d in enumerate(devices) if d[key] > 0]
    exact = [i for i, n in usable if n.lower() == name.lower()]
    if exact:
        return exact[0]
    partial = [(i, n) for i, n in usable if name.lower() in n.lower()]
    if not partial:
        raise NoAudioDevice(f"no audio {kind} device named {name!r}; see --list-devices")
    if len(partial) > 1:
        names = ", ".join(f"{i}: {n}" for i, n in partial)
        raise ValueError(f"{name!r} matches several {kind} devices ({names}): give its index or full name")
    return partial[0][0]


def _defaults(sd) -> tuple[int | None, int | None]:
    """(default input index, default output index), None where there is none."""
    try:
        pair = sd.default.device
        defaults = [int(pair[0]), int(pair[1])]
    except (TypeError, ValueError, IndexError):
        defaults = [-1, -1]
    devices = sd.query_devices()
    for k, kind in enumerate(("input", "output")):
        if defaults[k] < 0:  # PortAudio's own default
            try:
                defaults[k] = int(sd.query_devices(kind=kind)["index"])
            except (sd.PortAudioError, ValueError, KeyError):
                defaults[k] = -1
    return tuple(i if 0 <= i < len(devices) else None for i in defaults)
