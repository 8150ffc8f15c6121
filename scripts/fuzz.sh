#!/usr/bin/env bash
# Fuzz every target in fuzz/ (libFuzzer through cargo fuzz) for SECONDS each (default 20), starting from
# the committed seeds. New inputs go to fuzz/corpus/<target> (not committed); a crash stops the run
# and leaves its input in fuzz/artifacts/<target>.
#
#   scripts/fuzz.sh                 # CI's short run
#   SECONDS_EACH=600 scripts/fuzz.sh image_decode audio_decode
#
# Runs on the stable toolchain: without a sanitizer (-s none) cargo fuzz needs no nightly flags; Rust's
# own checks (bounds, overflow in debug assertions) and the targets' assertions are what trip.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${SECONDS_EACH:-20}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request_json data_uri image_decode audio_decode)
cargo fuzz build -s none --release
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "fuzzing $t for ${seconds}s"
  cargo fuzz run "$t" "corpus/$t" "seeds/$t" -s none --release -- -max_total_time="$seconds" -print_final_stats=1 2>&1 \
    | grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|ERROR|panicked" || true
  # A crash makes cargo fuzz exit non-zero and leaves an artifact.
  if [ -n "$(ls -A "artifacts/$t" 2>/dev/null)" ]; then
    echo "fuzz target $t found a crash: fuzz/artifacts/$t"
    exit 1
  fi
done
