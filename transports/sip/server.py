"""The SIP listener: answers INVITEs itself (a PBX or SIP trunk sends calls straight to it), one
pipecat pipeline per call, on aiosipua (SIP user agent server, SDP offer/answer) and aiortp (RTP).

    INVITE ─▶ allowed source? else 403 ─ cap? 486 ─ offer has PCMU/PCMA? else 488 ─ RTP port? else 503
    ─▶ 200 OK (SDP answer), ACK, RTP both ways (RtpCallTransport) ... BYE/CANCEL from the caller,
    our BYE at shutdown, or our BYE when the caller's RTP stops for `rtp_timeout_s` (a caller gone
    without a BYE: a crashed phone, a lost network)

Signalling over UDP and TCP on the same port (`transports`); with `register`, the listener also
keeps a binding at a registrar (register.py), so a PBX routes its extension's calls here.

Bounds: `max_calls` calls at once (ringing ones included); every INVITE past it gets 486 Busy Here
at once, holding nothing. With `allow_from` (networks), an INVITE from elsewhere gets 403. RTP is
only taken from the host the caller's SDP named (packets from elsewhere are counted and dropped,
never played into a call), and the bot sends only there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiortp.port_allocator import PortAllocator
from aiosipua import IncomingCall, SipUAS
from aiosipua.rtp_bridge import CallSession
from aiosipua.sdp_negotiate import SdpNegotiationError
from aiosipua.transport import TcpSipTransport, UdpSipTransport
from loguru import logger

from agent.pipeline import AgentConfig
from transports.telephony.call import run_call

from .register import RegisterConfig, Registrant
from .transport import RtpCallTransport

CODECS = [0, 8]  # G.711 mu-law (PCMU), A-law (PCMA)
MAX_CALLS = 8
RTP_TIMEOUT_S = 20.0  # phones send RTP every 20 ms, silence included; this long without any, the caller is gone
TRANSPORTS = {"udp": UdpSipTransport, "tcp": TcpSipTransport}


def networks(allow: Sequence[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Addresses or CIDR networks, e.g. ["10.0.0.0/8", "203.0.113.7"]; a bad one is a clear error."""
    try:
        return [ipaddress.ip_network(a.strip(), strict=False) for a in allow]
    except ValueError as e:
        raise ValueError(f"SIP allow-list: {e}") from None


@dataclass
class SipCall:
    call_id: str
    incoming: IncomingCall
    hangup: asyncio.Event = field(default_factory=asyncio.Event)
    session: CallSession | None = None
    transport: RtpCallTransport | None = None
    tts: object = None
    task: asyncio.Task | None = None
    rtp_port: int = 0
    by_caller: bool = False
    timed_out: bool = False  # ended because the caller's RTP stopped
    foreign_rtp: int = 0  # RTP packets from a host the call did not name, dropped
    last_rtp: float = 0.0  # time.monotonic() of the caller's last RTP packet


class SipServer:
    def __init__(self, cfg: AgentConfig, *, host: str = "0.0.0.0", port: int = 5060, media_ip: str | None = None,
                 advertised_ip: str | None = None, max_calls: int = MAX_CALLS,
                 rtp_ports: tuple[int, int] = (20000, 30000), rtp_timeout_s: float = RTP_TIMEOUT_S,
                 transports: Sequence[str] = ("udp",), allow_from: Sequence[str] = (),
                 register: RegisterConfig | None = None):
        """`media_ip`: the address RTP binds to (default: `host`); `advertised_ip`: the address
        written into SDP and Contact (behind NAT, or when listening on all addresses);
        `allow_from`: the networks INVITEs may come from (empty: any; a registrar is added)."""
        if max_calls < 1:
            raise ValueError(f"max_calls must be >= 1, got {max_calls}")
        if not rtp_timeout_s > 0:
            raise ValueError(f"rtp_timeout_s must be > 0, got {rtp_timeout_s}")
        if not transports or set(transports) - set(TRANSPORTS):
            raise ValueError(f"SIP transports must be among {', '.join(TRANSPORTS)}, got {list(transports)}")
        if not (1024 <= rtp_ports[0] < rtp_ports[1] <= 65535):
            raise ValueError(f"rtp_ports must be a range within 1024-65535, got {rtp_ports}")
        if register is not None and "udp" not in transports:
            raise ValueError("registering needs the udp SIP transport")
        if host in ("0.0.0.0", "") and not advertised_ip:
            raise ValueError("listening on all addresses: set advertised_ip (the address callers send RTP to)")
        self.cfg = cfg
        self.host, self.port = host, port
        self.media_ip = media_ip or host
        self.advertised_ip = advertised_ip
        self.max_calls = max_calls
        self.rtp_timeout_s = rtp_timeout_s
        self.transports = tuple(dict.fromkeys(transports))
        self.allow_from = networks(allow_from)
        self.register = register
        self.registrant: Registrant | None = None
        self.calls: dict[str, SipCall] = {}
        self.refused: dict[int, int] = {}  # status code -> count
        self._ports = PortAllocator(rtp_ports)
        self._uas: SipUAS | None = None  # the first transport's; all share one table of dialogs
        self._all_uas: list[SipUAS] = []

    async def start(self) -> None:
        dialogs: dict[str, IncomingCall] = {}
        for name in self.transports:
            sip = TRANSPORTS[name](local_addr=(self.host, self.port))
            uas = SipUAS(sip, user_agent="Cadence phone",
                         advertised_addr=(self.advertised_ip, self.port) if self.advertised_ip else None)
            # One table of dialogs for all transports: our Contact names no transport, so a phone
            # that sent its INVITE over TCP may send the ACK or BYE over UDP (pinned aiosipua 0.7.1).
            uas._calls = dialogs
            uas.on_invite = self._on_invite
            uas.on_bye = self._on_bye
            uas.on_cancel = self._on_cancel
            uas.on_ack_timeout = self._on_lost  # our 200 OK was never acknowledged: the caller is gone
            uas.on_session_expired = self._on_lost
            await uas.start()
            self._all_uas.append(uas)
            if self.port == 0:  # the bound port, for port 0: the other transports take the same
                self.port = (sip._udp_transport.get_extra_info("sockname") if name == "udp"
                             else sip._server.sockets[0].getsockname())[1]
        self._uas = self._all_uas[0]
        logger.info(f"SIP: listening on {'+'.join(self.transports)} {self.host}:{self.port} "
                    f"(up to {self.max_calls} calls)")
        if self.register is not None:
            udp = self._all_uas[self.transports.index("udp")]
            self.registrant = Registrant(udp, self.register, advertised=(self.advertised_ip or self.host, self.port))
            if self.allow_from:  # calls the registrar routes here come from it
                try:
                    self.allow_from += networks(await self.registrant.addresses())
                except OSError as e:
                    logger.error(f"SIP: cannot resolve the registrar {self.register.registrar}: {e}")
            self.registrant.start()

    async def stop(self) -> None:
        if self.registrant is not None:
            await self.registrant.stop()
        for call in list(self.calls.values()):
            call.hangup.set()
        await asyncio.gather(*(c.task for c in list(self.calls.values()) if c.task), return_exceptions=True)
        for uas in self._all_uas:
            await uas.stop()
        self._all_uas.clear()
        self._uas = None

    def _refuse(self, incoming: IncomingCall, code: int, reason: str, why: str) -> None:
        logger.warning(f"SIP: refused call {incoming.call_id} from {incoming.caller} with {code}: {why}")
        self.refused[code] = self.refused.get(code, 0) + 1
        incoming.reject(code, reason)
        # The UAS keeps every INVITE's call until a BYE or CANCEL; a refused one gets neither.
        if self._uas is not None:
            self._uas._calls.pop(incoming.call_id, None)  # pinned aiosipua 0.7.1

    def _allowed(self, host: str) -> bool:
        if not self.allow_from:
            return True
        with contextlib.suppress(ValueError):
            address = ipaddress.ip_address(host)
            return any(address in net for net in self.allow_from)
        return False

    def _on_invite(self, incoming: IncomingCall) -> None:
        if not self._allowed(incoming.source_addr[0]):
            return self._refuse(incoming, 403, "Forbidden", f"{incoming.source_addr[0]} is not in the allow-list")
        if incoming.call_id in self.calls:
            # A retransmission of an INVITE being answered (UDP): the 200 OK is on its way. The UAS
            # took it for a new call with a dialog of its own; the call keeps the first one, whose
            # tag the 200 OK carries (pinned aiosipua 0.7.1).
            self._uas._calls[incoming.call_id] = self.calls[incoming.call_id].incoming
            return
        if len(self.calls) >= self.max_calls:
            return self._refuse(incoming, 486, "Busy Here", f"{self.max_calls} calls are up")
        if incoming.sdp_offer is None:
            return self._refuse(incoming, 488, "Not Acceptable Here", "no SDP offer (late offers are not supported)")
        call = self.calls[incoming.call_id] = SipCall(incoming.call_id, incoming)
        call.task = asyncio.get_running_loop().create_task(self._run(call))

    async def _answer(self, call: SipCall) -> bool:
        """Negotiate, bind RTP and send 200 OK; False if the call was refused."""
        offer = call.incoming.sdp_offer
        try:
            rtp_port, _ = await self._ports.allocate()
        except RuntimeError:
            self._refuse(call.incoming, 503, "Service Unavailable", "no free RTP port")
            return False
        try:
            call.session = CallSession(self.media_ip, rtp_port, offer, advertised_ip=self.advertised_ip,
                                       supported_codecs=CODECS)
        except (SdpNegotiationError, ValueError) as e:
            await self._ports.release(rtp_port)
            self._refuse(call.incoming, 488, "Not Acceptable Here", f"no common codec or no audio ({e})")
            return False
        call.rtp_port = rtp_port
        await call.session.start()
        if call.hangup.is_set():  # CANCELled while the port was bound
            return False
        self._only_from(call, offer.rtp_address[0])
        call.incoming.accept(call.session.sdp_answer)
        codec = {0: "PCMU", 8: "PCMA"}[call.session.chosen_payload_type]
        logger.info(f"SIP: answered {call.call_id} from {call.incoming.caller} ({codec}, RTP {rtp_port})")
        return True

    def _only_from(self, call: SipCall, host: str) -> None:
        """Drop RTP not sent from `host` (the caller's SDP address): no one else may speak into the
        call. aiortp has no source filter; its transport's packet callback is wrapped (pinned 0.8.0)."""
        rtp = call.session.rtp_session._rtp_transport
        deliver = rtp._on_rtp

        call.last_rtp = time.monotonic()  # the caller has until the timeout to start sending

        def from_caller_only(data: bytes, addr: tuple[str, int]) -> None:
            if addr[0] != host:
                call.foreign_rtp += 1
                if call.foreign_rtp in (1, 100, 10000):
                    logger.warning(f"SIP: call {call.call_id}: dropped RTP from {addr[0]}:{addr[1]}, "
                                   f"not the caller's {host} ({call.foreign_rtp} so far)")
                return
            call.last_rtp = time.monotonic()
            deliver(data, addr)

        rtp._on_rtp = from_caller_only

    async def _watch_rtp(self, call: SipCall) -> None:
        """Hang up once the caller's RTP has stopped for `rtp_timeout_s` (no BYE will come)."""
        while not call.hangup.is_set():
            silent_s = time.monotonic() - call.last_rtp
            if silent_s >= self.rtp_timeout_s:
                logger.warning(f"SIP: call {call.call_id}: no RTP from the caller for {silent_s:.1f} s; hanging up")
                call.timed_out = True
                call.hangup.set()
                return
            await asyncio.sleep(min(1.0, self.rtp_timeout_s - silent_s + 0.01))

    async def _run(self, call: SipCall) -> None:
        watchdog = None
        try:
            if not await self._answer(call):
                return
            watchdog = asyncio.get_running_loop().create_task(self._watch_rtp(call))
            call.transport = RtpCallTransport(call.session, name=f"sip-{call.call_id[:8]}")
            await run_call(self.cfg, call.transport, call.hangup, label=f"sip:{call.call_id}",
                           on_tts=lambda tts: setattr(call, "tts", tts))
        except Exception as e:
            logger.exception(f"SIP: call {call.call_id} failed: {e}")
            if not call.incoming._answered:
                self._refuse(call.incoming, 503, "Service Unavailable", f"{type(e).__name__}: {e}")
        finally:
            if watchdog is not None:
                watchdog.cancel()
                await asyncio.gather(watchdog, return_exceptions=True)
            if not call.by_caller and call.session is not None:
                try:
                    call.incoming.hangup()  # our BYE (shutdown, the RTP timeout, or the pipeline ended)
                except RuntimeError as e:  # a TCP caller whose connection is gone
                    logger.info(f"SIP: call {call.call_id}: BYE not sent ({e})")
            if call.session is not None:
                await call.session.close()
                await self._ports.release(call.rtp_port)
            if self._uas is not None:
                self._uas._calls.pop(call.call_id, None)
            self.calls.pop(call.call_id, None)
            logger.info(f"SIP: call {call.call_id} freed")

    def _on_bye(self, incoming: IncomingCall, _request) -> None:
        call = self.calls.get(incoming.call_id)
        if call is not None:
            call.by_caller = True
            call.hangup.set()

    def _on_lost(self, incoming: IncomingCall) -> None:
        call = self.calls.get(incoming.call_id)
        if call is not None:
            logger.warning(f"SIP: call {call.call_id}: the caller is gone (no ACK, or the session expired)")
            call.hangup.set()

    def _on_cancel(self, request, _addr) -> None:
        call = self.calls.get(request.call_id or "")
        if call is not None:
            call.by_caller = True
            call.hangup.set()

