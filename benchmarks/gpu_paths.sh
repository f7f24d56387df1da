#!/usr/bin/env bash
# Exercises every CUDA path of scaleprobe on a one-GPU host and keeps the results:
# CUDA events, NVML, AMP (bf16, fp16), channels-last, NCCL DDP, pinned pipelined loading,
# a real CUDA out-of-memory and the batch-size search that bisects to it, the profiler with
# CUDA activity, detection and face tasks on the GPU, the overhead against a bare loop, the
# one-line errors for too few devices, and the report over all of it.
#   bash benchmarks/gpu_paths.sh OUTDIR        (PYTHONPATH=src, or scaleprobe installed)
set -u
OUT=${1:-gpu-out}
SP="python3 -m scaleprobe"
mkdir -p "$OUT"
step() {
    echo; echo "=== $*"
    local t0=$SECONDS
    timeout "${T:-120}" "$@"
    echo "exit code: $? ($((SECONDS - t0)) s)"
}
R18="--model resnet18 --dataset synthetic --image-size 64 --batch-size 256 --no-progress"
step $SP env
step $SP run $R18 --steps 40 --out "$OUT" --name fp32
step $SP run $R18 --steps 40 --amp bf16 --channels-last --out "$OUT" --name bf16-cl
step $SP run $R18 --steps 40 --amp fp16 --out "$OUT" --name fp16
step $SP run $R18 --steps 40 --strategy ddp --nproc 1 --out "$OUT" --name ddp-nccl
step $SP run $R18 --steps 20 --profile-every 0.5 --summary-every 0.5 --out "$OUT" --name profiled
step $SP run --model resnet50 --dataset synthetic --image-size 224 --batch-size 4096 --steps 3 \
    --warmup-steps 1 --num-samples 8192 --out "$OUT" --name oom --no-progress
step $SP run --strategy dp --steps 3 --out "$OUT" --no-progress
step $SP run --strategy ddp --nproc 2 --steps 3 --out "$OUT" --no-progress
step $SP run --epochs 3 --eval --out "$OUT" --name digits-cuda --no-progress
step $SP run --task face --loss triplet --epochs 2 --eval --amp bf16 --out "$OUT" \
    --name face-triplet-bf16 --no-progress
step $SP datagen voc --out "$OUT/voc" --count 60
step $SP run --task detection --dataset voc --data-dir "$OUT/voc" --image-size 128 --batch-size 8 \
    --steps 10 --eval --out "$OUT" --name ssdlite-voc --no-progress
cat > "$OUT/auto.toml" <<'TOML'
[sweep]
id = "resnet34-512px-auto"
batch_start = 64
batch_max = 1024
max_probes = 6
batch_round = 16
[base]
model = "resnet34"
dataset = "synthetic"
image_size = 512
num_samples = 1100
loader = "pipelined"
workers = 8
steps = 2
warmup_steps = 1
[grid]
batch_size = "auto"
TOML
T=240 step $SP sweep "$OUT/auto.toml" --out "$OUT/auto" --no-progress
T=200 step python3 benchmarks/overhead.py --model resnet18 --size 64 --batch 256 --steps 40 \
    --pairs 2
step $SP run --model resnet18 --dataset jpeg-synth --num-samples 2000 --image-size 128 \
    --batch-size 128 --loader pipelined --workers 8 --epochs 1 --out "$OUT" \
    --name jpeg-pipelined --no-progress
step $SP report "$OUT" --findings
