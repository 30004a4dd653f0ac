# Sourced by bench/gpu/run.sh (repo root, on the device machine): the server wheels (and .whl-clone's, where
# carried) onto PYTHONPATH, and `ensure_checkpoint` for the 1.7B random-weight checkpoint at /tmp/ckpt. The
# marker names the wheels installed, so a warm machine given other wheels installs them.
wheels=$(ls .whl/*.whl | md5sum | cut -c1-12)
[ -f /tmp/site/.cadence-installed-$wheels ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.cadence-installed-$wheels; } || exit 1
if [ -d .whl-clone ]; then python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl-clone/*.whl || exit 1; fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1

ensure_checkpoint() {
  [ -f /tmp/ckpt/model.safetensors ] || python3 -m tts_engine.cli make-checkpoint --size 1.7b --out /tmp/ckpt \
    --device cuda > "$OUT/make.log" 2>&1
}
