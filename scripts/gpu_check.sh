#!/usr/bin/env bash
# The GPU checks of docs/gpu.md ("On a GPU machine: what to run first"), in one go.
# Usage: bash scripts/gpu_check.sh [LOG_DIR [STEP ...]]   (default: ./gpu-check, every step)
# Steps: pytest_cuda selftest_ddp selftest_ddp_servers selftest_ddp_intra selftest_native
#        hook_overhead hook_overhead_s2_4m train_ddp calibrate_host train_native interrupt
#        goodput_ddp goodput_native probe
# Each step runs under a time limit, writes its output to LOG_DIR/<step>.log and its JSON
# beside it; a failing step is reported and the next one runs. Exit code: the number of
# failed steps. Needs python with torch (CUDA build) and this package's dependencies.
set -u
LOG=${1:-gpu-check}
shift || true
WANT=" ${*:-pytest_cuda selftest_ddp selftest_ddp_servers selftest_ddp_intra selftest_native hook_overhead hook_overhead_s2_4m train_ddp calibrate_host train_native interrupt goodput_ddp goodput_native probe} "
mkdir -p "$LOG"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
failed=0
if ! command -v autotune >/dev/null; then  # not installed: run the CLI from this checkout
    BIN=$(mktemp -d); export PATH="$BIN:$PATH"
    printf '#!/bin/sh\nexec "%s" -c "import sys; from autotune.cli import main; sys.argv[0] = \\"autotune\\"; main()" "$@"\n' "$PY" >"$BIN/autotune"
    chmod +x "$BIN/autotune"
fi
step() {  # step NAME LIMIT_S COMMAND...
    local name=$1 limit=$2; shift 2
    [[ $WANT == *" $name "* ]] || return 0
    echo "=== $name: $*"
    local t0=$SECONDS
    ( timeout -k 10 "$limit" "$@" ) >"$LOG/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$LOG/$name.log"
    echo "=== $name: exit $rc after $((SECONDS - t0)) s"
    [ $rc -eq 0 ] || failed=$((failed + 1))
}
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
  "gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")'
nvidia-smi -L 2>/dev/null
step pytest_cuda 300 "$PY" -m pytest -q -p no:cacheprovider tests/runtime/test_ddp_hook.py \
    tests/runtime/test_native_staging.py tests/runtime/test_codecs.py tests/probes/test_probes.py
step selftest_ddp 200 autotune selftest --ddp --device cuda -n 2 --lossy --json-out "$LOG/selftest-ddp.json"
# the hook's push/pull (a server, and the workers' own Summation Services) and intra-machine
# step (2 emulated machines x 2 workers) on CUDA buckets: ranks share the GPU, so gloo on
# CUDA tensors, staged through pinned host memory (issue 41)
step selftest_ddp_servers 200 autotune selftest --ddp --device cuda -n 2 -k 1 --lossy \
    --json-out "$LOG/selftest-ddp-servers.json"
step selftest_ddp_intra 200 autotune selftest --ddp --device cuda -n 4 -k 1 --machines 2 --quick \
    --json-out "$LOG/selftest-ddp-intra.json"
step selftest_native 200 autotune selftest --device cuda --lossy --json-out "$LOG/selftest-native.json"
step hook_overhead 240 autotune launch -n 2 benchmarks/hook_overhead_bench.py --device cuda \
    --json "$LOG/hook-overhead.json"
step hook_overhead_s2_4m 240 autotune launch -n 2 benchmarks/hook_overhead_bench.py --device cuda \
    --streams 2 --chunk-mib 4 --json "$LOG/hook-overhead-s2-4m.json"
# the session API on CUDA gradients, both ways in (examples/, 2 ranks sharing the GPU)
step train_ddp 150 autotune launch -n 2 examples/train_ddp.py --device cuda --db "$LOG/ddp.db"
# the tuner's model measures the job's device (issue 40): the copy into pinned host memory
# (pcie_gbps) and each codec on the GPU, synchronised; every rate finite and positive
step calibrate_host 60 "$PY" -c "from autotune.sim.calibration import measure_host
c = measure_host(chunk_bytes=4 << 20, codecs=['fp16', 'topk', 'powersgd'], device='cuda')
import json; print(c.describe()); d = json.loads(c.to_json()); print(d)
assert d['constants'].get('pcie_gbps', 0) > 0 and 'intra_gbps' not in d['constants'], d
assert all(v > 0 for v in d['constants'].values()) and len(d['codecs']) == 3, d"
# ... and the two-rank session stores it under the GPU's name (autotune db calibrations)
step train_native 150 bash -c "autotune launch -n 2 -k 1 examples/train_mlp.py --device cuda \
  --db \"$LOG/native.db\" && autotune db calibrations --db \"$LOG/native.db\" --json | tee \"$LOG/calibrations.json\" \
  && \"$PY\" -c 'import json, sys, torch; rows = json.load(open(sys.argv[1]))
print([r[\"device\"] for r in rows]); sys.exit(not any(r[\"device\"] == torch.cuda.get_device_name(0) for r in rows))' \"$LOG/calibrations.json\""
# Ctrl-C / SIGTERM at random moments with CUDA models (tests/interrupt_jobs.py): every
# job must close "aborted", every rank exit 130 or 143, nothing killed, no traceback
step interrupt 200 bash -c "\"$PY\" tests/interrupt_jobs.py \"$LOG/interrupt.json\" --jobs 8 \
  --seed 38 --device cuda && \"$PY\" -c 'import json, sys; j = json.load(open(sys.argv[1]))
bad = [(x[\"job\"], x[\"way\"], x[\"status\"], x[\"codes\"]) for x in j if x[\"status\"] != \"aborted\"
       or x[\"killed\"] or any(c not in (130, 143) for c in x[\"codes\"]) or \"Traceback\" in \"\".join(x[\"logs\"])]
print(len(j), \"jobs,\", len(bad), \"bad:\", bad); sys.exit(bool(bad))' \"$LOG/interrupt.json\""
# goodput on CUDA gradients (issue 39): sampled before and after averaging (the DDP hook's
# bucket futures, the native runtime's staged .grad); random-k at 5 % must be rejected
# (efficiency < 0.5; failed, or cut short on its switch iteration) and lossless kept
for kind in ddp native; do
    mkdir -p "$LOG/goodput-$kind"
    step goodput_$kind 150 bash -c "autotune launch -n 2 tests/goodput_worker.py $kind goodput \
      \"$LOG/goodput-$kind\" cuda && \"$PY\" -c 'import json, sys
j = json.load(open(sys.argv[1])); lossy = [t for t in j[\"trials\"] if t[\"config\"][\"compression\"] != \"none\"]
print(len(j[\"trials\"]), \"trials,\", len(lossy), \"random-k:\", [(t[\"efficiency\"], t[\"error\"] and t[\"error\"][:40]) for t in lossy])
print(\"noise scale\", j[\"noise_scale\"], \"kept\", j[\"best\"][\"compression\"])
sys.exit(not lossy or j[\"best\"][\"compression\"] != \"none\" or any(t[\"efficiency\"] is None or t[\"efficiency\"] >= 0.5
         or (t[\"score\"] is not None and t[\"iterations\"] != 1) for t in lossy))' \"$LOG/goodput-$kind/result.json\""
done
# the machine as the probes read it, beside nvidia-smi's own matrix (issue 41)
step probe 60 bash -c "autotune probe --json | tee \"$LOG/probe.json\"; nvidia-smi topo -m | tee \"$LOG/topo.txt\""
echo "failed steps: $failed"
exit $failed
