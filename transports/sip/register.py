"""Keeping the SIP listener registered at a registrar (a company's PBX), so calls to its extension
reach the bot: aiosipua's `Registration` (REGISTER, digest auth, refresh at 90 % of the granted
interval, un-REGISTER) on the listener's own UDP socket, supervised here.

    start ─▶ REGISTER ─▶ 401 ─▶ REGISTER + Authorization ─▶ 200 (refreshed before it expires)
               │ a failure (403, 404, no answer, a refresh that failed, an expired binding)
               └─▶ logged with its status, retried after 1, 2, 4 ... 300 s (reset once registered)
    stop ─▶ REGISTER with Expires: 0 (waits briefly for the 200)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import dataclass

from aiosipua import SipUAC, SipUAS
from aiosipua.auth import SipDigestAuth
from aiosipua.registration import Registration, RegistrationState
from loguru import logger

ANSWER_TIMEOUT_S = 8.0  # a REGISTER with no final answer by then counts as failed (UDP may lose it)
BACKOFF_S = (1.0, 300.0)  # first and longest wait before trying again


@dataclass(frozen=True)
class RegisterConfig:
    registrar: str  # host or host:port of the registrar (the PBX)
    user: str  # the extension: the bot's address of record is sip:user@domain
    password: str = ""
    domain: str | None = None  # the address of record's domain (default: the registrar's host)
    auth_user: str | None = None  # the digest user name, where it differs from `user`
    expires: int = 300

    def __post_init__(self):
        if not self.registrar or not self.user:
            raise ValueError("registering needs a registrar and a user")
        if not 5 <= self.expires <= 86400:
            raise ValueError(f"register expires must be in 5-86400 s, got {self.expires}")
        self.address()

    def address(self) -> tuple[str, int]:
        host, _, port = self.registrar.rpartition(":") if self.registrar.count(":") == 1 else (self.registrar, "", "")
        if port and not port.isdigit():
            raise ValueError(f"registrar must be host or host:port, got {self.registrar!r}")
        return host, int(port or 5060)

    @property
    def aor(self) -> str:
        return f"sip:{self.user}@{self.domain or self.address()[0]}"


class Registrant:
    """Registers `uas`'s listener (its transport must be UDP) and keeps it registered."""

    def __init__(self, uas: SipUAS, cfg: RegisterConfig, *, advertised: tuple[str, int],
                 backoff_s: tuple[float, float] = BACKOFF_S, answer_timeout_s: float = ANSWER_TIMEOUT_S):
        self.cfg = cfg
        self.backoff_s = backoff_s
        self.answer_timeout_s = answer_timeout_s
        self._uas = uas
        self._advertised = advertised
        self._outcome: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self.registration: Registration | None = None
        self.attempts = 0  # REGISTERs sent by the supervisor (not counting aiosipua's refreshes)
        self.registered = 0  # 200 OKs to a REGISTER, refreshes included
        self.failures: list[tuple[float, str]] = []  # (time.monotonic(), why) of each failed attempt

    async def addresses(self) -> list[str]:
        """The registrar's IP addresses (calls routed by it come from there)."""
        host, port = self.cfg.address()
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_DGRAM)
        return sorted({info[4][0] for info in infos})

    def start(self) -> None:
        uac = self._uas.uac = SipUAC(self._uas.transport, advertised_addr=self._advertised)
        host, port = self.cfg.address()
        auth = SipDigestAuth(self.cfg.auth_user or self.cfg.user, self.cfg.password) if self.cfg.password else None
        self.registration = reg = Registration(
            uac, self.cfg.aor, (host, port), expires=self.cfg.expires, auth=auth, user_agent="Cadence phone",
            contact_uri=f"sip:{self.cfg.user}@{self._advertised[0]}:{self._advertised[1]}")
        reg.on_registered = lambda r: self._tell("registered")
        reg.on_failed = lambda r, code, reason: self._tell(f"{code} {reason}")
        reg.on_expired = lambda r: self._tell("the binding expired (a refresh got no answer)")
        self._task = asyncio.get_running_loop().create_task(self._supervise())

    def _tell(self, outcome: str) -> None:
        self._outcome.put_nowait(outcome)

    async def _supervise(self) -> None:
        reg = self.registration
        wait = self.backoff_s[0]
        while True:
            self.attempts += 1
            reg.register()
            while True:  # registered (then refreshed by aiosipua), until something fails
                try:
                    outcome = await asyncio.wait_for(self._outcome.get(), self.answer_timeout_s
                                                     if reg.state != RegistrationState.REGISTERED else None)
                except TimeoutError:
                    outcome = f"no answer within {self.answer_timeout_s:g} s"
                if outcome != "registered":
                    break
                self.registered += 1
                wait = self.backoff_s[0]
                logger.info(f"SIP: registered {self.cfg.aor} at {self.cfg.registrar} for {reg.granted_expires} s")
            self.failures.append((time.monotonic(), outcome))
            hint = " (check the user and password)" if outcome.startswith(("401", "403", "407")) else ""
            logger.error(f"SIP: registering {self.cfg.aor} at {self.cfg.registrar} failed: {outcome}{hint}; "
                         f"trying again in {wait:g} s")
            reg._cancel_timers()  # pinned aiosipua 0.7.1: a late refresh must not race the retry
            await asyncio.sleep(wait)
            wait = min(wait * 2, self.backoff_s[1])

    async def stop(self, timeout_s: float = 2.0) -> None:
        """Stop retrying; remove the binding if there is one (its 200 is awaited up to `timeout_s`)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        reg = self.registration
        if reg is None:
            return
        if reg.state == RegistrationState.REGISTERED:
            reg.unregister()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    while reg.state != RegistrationState.UNREGISTERED:
                        await asyncio.sleep(0.02)
            logger.info(f"SIP: {'unregistered' if reg.state == RegistrationState.UNREGISTERED else 'no answer to'}"
                        f" un-REGISTER of {self.cfg.aor}")
        reg._cancel_timers()
        self._uas.uac._registrations.pop(reg.call_id, None)
