"""Carrier media streams (Twilio, Telnyx, Plivo): call webhooks and one WebSocket endpoint on
pipecat's serializers and FastAPIWebsocketTransport, with the carrier's mark acknowledgements as
the playout clock. `endpoint.create_app` is the server; `call.run_call` runs one call's pipeline
(the SIP listener uses it too)."""
