"""SIP calls with no carrier in between: a user agent server on aiosipua (signalling) and aiortp
(RTP: G.711 mu-law and A-law, jitter buffer, RFC 4733 DTMF), one pipecat pipeline per call."""
