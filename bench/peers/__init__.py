"""Peer adapters: other Qwen3-TTS packages behind our `POST /v1/audio/speech`, so `cadence bench`
measures them with the same client, on the same GPU, from the same checkpoint directory.

  python -m bench.peers.qwen_tts --model DIR --port 8101           official qwen-tts (non-streaming)
  python -m bench.peers.faster_qwen3_tts --model DIR --port 8102   faster-qwen3-tts (CUDA graphs, streaming)

`server.py` is what they share (request checks, length rule, one-at-a-time worker, PCM body);
`compat.py` what they need to import and load on the machines we have. docs/peers.md says how
to run them and what their numbers mean.
"""
