"""The local microphone-and-speaker transport on sounddevice (`cadence talk`).

    devices.py    devices by name or index; the clear error when there is none
    clock.py      the playout buffer the output callback reads, and its DAC clock
    transport.py  pipecat input/output transports on sounddevice streams
    echo.py       what the microphone may hear while the bot speaks (gate, AEC, headphones)
    playout.py    playout feedback to the engine from the DAC clock
    status.py     the live terminal line: state, transcripts, per-turn latency as heard
"""
