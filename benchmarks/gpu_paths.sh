#!/usr/bin/env bash
# Exercises every CUDA path of scaleprobe on a GPU host and keeps the results:
# CUDA events, NVML, AMP (bf16, fp16), channels-last, NCCL DDP, pinned pipelined loading,
# a real CUDA out-of-memory, and the one-line errors for too few devices.
#   bash benchmarks/gpu_paths.sh OUTDIR
set -u
OUT=${1:-gpu-out}
SP="python3 -m scaleprobe"
mkdir -p "$OUT"
step() { echo; echo "=== $*"; "$@"; echo "exit code: $?"; }
step $SP env
step $SP run --model resnet18 --dataset synthetic --image-size 64 --batch-size 256 --steps auto --out "$OUT" --name fp32 --no-progress
step $SP run --model resnet18 --dataset synthetic --image-size 64 --batch-size 256 --steps auto --amp bf16 --channels-last --out "$OUT" --name bf16-cl --no-progress
step $SP run --model resnet18 --dataset synthetic --image-size 64 --batch-size 256 --steps auto --amp fp16 --out "$OUT" --name fp16 --no-progress
step $SP run --strategy ddp --nproc 1 --model resnet18 --dataset synthetic --image-size 64 --batch-size 256 --steps 40 --out "$OUT" --name ddp-nccl --no-progress
step $SP run --model resnet18 --dataset jpeg-synth --num-samples 2000 --image-size 128 --batch-size 128 --loader pipelined --workers 8 --epochs 2 --out "$OUT" --name jpeg-pipelined --no-progress
step $SP run --model resnet18 --dataset jpeg-synth --num-samples 2000 --image-size 128 --batch-size 128 --loader naive --epochs 2 --out "$OUT" --name jpeg-naive --no-progress
step $SP run --model resnet50 --dataset synthetic --image-size 224 --batch-size 4096 --steps 3 --warmup-steps 1 --out "$OUT" --name oom --no-progress
step $SP run --strategy dp --steps 3 --out "$OUT" --no-progress
step $SP run --strategy ddp --nproc 2 --steps 3 --out "$OUT" --no-progress
step $SP run --epochs 3 --eval --out "$OUT" --name digits-cuda --no-progress
