#!/usr/bin/env bash
# Mutation testing (cosmic-ray) of a representative parser and the replay engine: `make mutation`.
# Runs in a scratch copy of the tree (imported as faultlens through PYTHONPATH), so the mutants
# never touch the working tree. Sized for two busy cores: a seeded sample of one mutant per
# source site (bench/mutation/sample.py), and per mutant only the tests of the mutated module.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${MUTATION_DIR:-$repo/bench/out/mutation}
rm -rf "$work"
mkdir -p "$work/src"
rsync -a --exclude .venv --exclude .git --exclude bench/out --exclude __pycache__ \
  "$repo/" "$work/src/faultlens/"
cd "$work/src/faultlens"
export PATH="$repo/.venv/bin:$PATH" PYTHONPATH="$work/src" PYTHONDONTWRITEBYTECODE=1
export FAULTLENS_SHARED=${FAULTLENS_SHARED:-$(cd "$repo/.." && pwd)/shared}
# session: config, sites sampled
for spec in "scontrol 40" "engine 70"; do
  set -- $spec
  cosmic-ray init "bench/mutation/$1.toml" "$work/$1.sqlite"
  python -m bench.mutation.sample sample "$work/$1.sqlite" --sites "$2" --seed 0
  cosmic-ray exec "bench/mutation/$1.toml" "$work/$1.sqlite"
done
python -m bench.mutation.sample summary "$work"/*.sqlite | tee "$work/summary.txt"
