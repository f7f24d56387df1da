#!/usr/bin/env bash
# The GPU measurements docs/BENCHMARKS.md keeps, on a one-GPU host, in two parts that each fit
# in under five minutes on an H100:
#   bash benchmarks/gpu_check.sh OUT tests    the GPU tests (pytest -m gpu), then resnet50 at
#                                             224 px, bf16, channels_last, batch 256 on
#                                             device-resident data: samples/s, TFLOP/s, MFU
#   bash benchmarks/gpu_check.sh OUT speed    scaleprobe's overhead against the bare loop where
#                                             the GPU is the limit (overhead.py --gpu-bound), the
#                                             loader's ceiling per part at 512 px, and the batch
#                                             search of resnet34 at 512 px with 10 timed steps
#                                             per probe, each probe's data wait step by step
#   bash benchmarks/gpu_check.sh OUT lm       gpt2_small (bf16, batch 16) against a plain
#                                             nanoGPT-style script, eager and compiled, one
#                                             bare/scaleprobe/bare triple each (lm_vs_bare.py),
#                                             then FSDP bf16 on resnet18 (BatchNorm kept fp32)
#   bash benchmarks/gpu_check.sh OUT memory   the memory model against CUDA's allocator: the
#                                             validation grid's one-rank points (ddp and fsdp
#                                             on 1, batch 16-64, and the fits check alone),
#                                             each predicted from one run at batch 8
# PYTHONPATH=src, or scaleprobe installed. Every step has its own time limit, and its output
# goes to OUT/<part>.log as it is printed.
set -u
OUT=${1:-gpu-check}
PART=${2:-tests}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SP="python3 -m scaleprobe"
LOG="$OUT/$PART.log"
step() {
    echo; echo "=== $*"
    local t0=$SECONDS
    timeout "${T:-120}" "$@"
    echo "exit code: $? ($((SECONDS - t0)) s)"
}
runs() {  # one line per run record of a results.jsonl, then each run's data wait per step
    python3 - "$1" <<'PY'
import csv, json, pathlib, sys
d = pathlib.Path(sys.argv[1])
recs = [json.loads(x) for x in (d / "results.jsonl").read_text().splitlines() if x.strip()]
for r in recs:
    if r.get("kind") != "run":
        continue
    m, b = r.get("metrics") or {}, r.get("batch") or {}
    st, pk = m.get("step_time_s") or {}, m.get("peak") or {}
    mem = m.get("peak_mem_bytes") or {}
    ach = m.get("achieved_flops_per_s")
    print(f"{r.get('name') or r['run_id']}: status {r['status']}, batch {b.get('global')}, "
          f"{m.get('samples_per_s') or 0:.1f} samples/s, step median "
          f"{(st.get('median') or 0) * 1000:.1f} ms (p95 {(st.get('p95') or 0) * 1000:.1f}), "
          f"data wait {m.get('data_wait_fraction')}, steps per epoch {m.get('steps_per_epoch')}, "
          f"{(ach or 0) / 1e12:.1f} TFLOP/s, MFU {m.get('mfu')} against "
          f"{(pk.get('flops_per_s') or 0) / 1e12:.0f} TFLOP/s ({pk.get('source')}), GPU util "
          f"{m.get('gpu_util_pct')}, device allocated {mem.get('device_allocated')}, "
          f"error {str(r.get('error'))[:160]}")
for f in sorted(d.rglob("steps.csv")):
    rows = list(csv.DictReader(f.open()))
    print(f"{f.parent.name}: data_s per step "
          + " ".join(f"{float(x['data_s']):.2f}" for x in rows)
          + " | step_s " + " ".join(f"{float(x['step_time_s']):.2f}" for x in rows))
PY
}

{
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -c "import torch, torchvision, sys; print(sys.version.split()[0], torch.__version__, \
torchvision.__version__, torch.cuda.get_device_name(0), torch.version.cuda)"
nproc; free -g | head -2; df -h /dev/shm | tail -1

if [ "$PART" = tests ]; then
    T=260 step python3 -m pytest -m gpu tests/integration/test_gpu.py -q -p no:cacheprovider \
        -o addopts="-ra"
    T=120 step $SP run --model resnet50 --dataset synthetic --image-size 224 --batch-size 256 \
        --amp bf16 --channels-last --steps 60 --warmup-steps 10 --out "$OUT/r50" \
        --name resnet50-224-bf16-cl-b256 --no-progress
    runs "$OUT/r50"
elif [ "$PART" = memory ]; then
    T=500 step python3 benchmarks/predict_memory_validation.py measure --out "$OUT/memval" \
        --ranks 1
    T=60 step python3 benchmarks/predict_memory_validation.py table --out "$OUT/memval" \
        --markdown
elif [ "$PART" = lm ]; then
    T=420 step python3 benchmarks/lm_vs_bare.py --pairs 1
    T=120 step $SP run --model resnet18 --dataset synthetic --image-size 64 --batch-size 64 \
        --steps 10 --warmup-steps 2 --strategy fsdp --nproc 1 --amp bf16 --eval \
        --out "$OUT/fsdp" --name fsdp-bf16-resnet18 --no-progress
    runs "$OUT/fsdp"
else
    T=200 step python3 benchmarks/overhead.py --gpu-bound --pairs 3
    T=60 step python3 benchmarks/loader_ceiling.py --size 512 --batch 64 128 256 384 448 \
        --workers 8
    cat > "$OUT/auto.toml" <<'TOML'
[sweep]
id = "resnet34-512px-auto-10steps"
batch_start = 64
batch_max = 1024
max_probes = 6
batch_round = 16
[base]
model = "resnet34"
dataset = "synthetic-loader"
image_size = 512
num_samples = 1100
loader = "pipelined"
workers = 8
steps = 10
warmup_steps = 2
[grid]
batch_size = "auto"
TOML
    T=230 step $SP sweep "$OUT/auto.toml" --out "$OUT/auto" --no-progress
    runs "$OUT/auto"
fi
date -u
} 2>&1 | tee "$LOG"
