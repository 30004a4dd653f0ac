"""`cadence phone`'s own settings: the `[phone]` table of the config file `cadence demo` reads (the
agent's settings are the rest of the file), secrets also from the environment.

    [phone]
    sip_transports = ["udp", "tcp"]
    sip_allow = ["10.0.0.0/8", "203.0.113.7"]   # who may send INVITEs (empty: anyone)
    rtp_timeout_s = 20                           # a caller silent this long (no RTP at all) is hung up
    twilio_auth_token = "..."                    # or CADENCE_TWILIO_AUTH_TOKEN
    telnyx_public_key = "..."                    # or CADENCE_TELNYX_PUBLIC_KEY
    plivo_auth_token = "..."                     # or CADENCE_PLIVO_AUTH_TOKEN

    [phone.register]                             # keep a binding at a registrar (a PBX)
    registrar = "pbx.example.com:5060"
    user = "2001"
    password = "..."                             # or CADENCE_SIP_PASSWORD
    domain = "example.com"                       # optional; auth_user, expires (300) too
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from transports.sip.register import RegisterConfig
from transports.sip.server import RTP_TIMEOUT_S

from .auth import CarrierKeys

SECRETS = {"twilio_auth_token": "CADENCE_TWILIO_AUTH_TOKEN", "telnyx_public_key": "CADENCE_TELNYX_PUBLIC_KEY",
           "plivo_auth_token": "CADENCE_PLIVO_AUTH_TOKEN"}
KEYS = {"sip_transports", "sip_allow", "rtp_timeout_s", "register", *SECRETS}
REGISTER_KEYS = {"registrar", "user", "password", "domain", "auth_user", "expires"}


@dataclass
class PhoneSettings:
    sip_transports: list[str] = field(default_factory=lambda: ["udp"])
    sip_allow: list[str] = field(default_factory=list)
    rtp_timeout_s: float = RTP_TIMEOUT_S
    keys: CarrierKeys = field(default_factory=CarrierKeys)
    register: RegisterConfig | None = None


class AgentSettingsText:
    """The config file less its `[phone]` table, for agent.demo.load_config (which reads `read_text()`
    and names the file in its errors)."""

    def __init__(self, path: Path, data: dict):
        self._path = path
        self._text = "".join(f"{json.dumps(key)} = {_toml(value)}\n" for key, value in data.items())

    def read_text(self) -> str:
        return self._text

    def __str__(self) -> str:
        return str(self._path)


def _toml(value) -> str:
    """A TOML value (JSON's strings, numbers and booleans are TOML's; tables are written inline)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def _table(where: str, value, known: set[str]) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a table")
    unknown = set(value) - known
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(sorted(known))})")
    return value


def load_phone_settings(path: Path | None, environ: dict[str, str]) -> tuple[AgentSettingsText | None, PhoneSettings]:
    """The agent's part of the file (None without a file) and the phone's settings."""
    data: dict = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path}: {e}") from None
    phone = _table(f"{path}: [phone]", data.pop("phone", {}), KEYS)
    secrets = {name: environ.get(env) or phone.get(name) for name, env in SECRETS.items()}
    settings = PhoneSettings(keys=CarrierKeys(**secrets))
    if "sip_transports" in phone:
        settings.sip_transports = list(phone["sip_transports"])
    if "sip_allow" in phone:
        settings.sip_allow = [str(a) for a in phone["sip_allow"]]
    if "rtp_timeout_s" in phone:
        settings.rtp_timeout_s = float(phone["rtp_timeout_s"])
    if "register" in phone:
        register = dict(_table(f"{path}: [phone.register]", phone["register"], REGISTER_KEYS))
        register["password"] = environ.get("CADENCE_SIP_PASSWORD") or register.get("password", "")
        try:
            settings.register = RegisterConfig(**register)
        except TypeError as e:
            raise ValueError(f"{path}: [phone.register]: {e}") from None
    return (AgentSettingsText(path, data) if path is not None else None), settings
