#!/bin/bash
# hsdp on 2 machines x 8 GPUs, config recipes/multinode-hgx-h200-8x2-hsdp/config.yaml
# Written by dist-config-generator. Submit with `sbatch THIS_FILE` from the directory the config path is
# relative to. The config's gpu_ids are physical ids, so the job takes whole nodes (--exclusive) and every
# GPU up to the highest id. Two minutes before the time limit SLURM sends SIGUSR1 to every process of the
# step: the launcher ignores it, train.py finishes the step, writes a checkpoint and exits 75 (resume with
# --resume). No --kill-on-bad-exit: the first node to finish its checkpoint would kill the others mid-save.
# The rendezvous on MAIN_IP:main_process_port has no authentication: keep it on the private network.
#SBATCH --job-name=mistral-7b-hsdp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --signal=USR1@120
set -euo pipefail

export CUDA_DEVICE_ORDER=PCI_BUS_ID
CONFIG=recipes/multinode-hgx-h200-8x2-hsdp/config.yaml
HOSTS="$(scontrol show hostnames "$SLURM_JOB_NODELIST")"
MAIN_IP="${HOSTS%%$'\n'*}"
LAUNCH_FLAGS=(--rdzv_backend static --same_network --enable_cpu_affinity)
# recipes/data/ is a small synthetic sample: replace --dataset with your data and --max-steps with your run
TRAIN_ARGS=(--model mistralai/Mistral-7B-v0.1 --seq-len 4096 --micro-batch 2 --global-batch 64 --no-grad-checkpointing --attn-implementation flex_attention --dataset recipes/data/synthetic_instruct.jsonl --max-steps 100)

srun --nodes=2 --ntasks-per-node=1 \
    bash -c 'trap "" USR1; exec accelerate launch --machine_rank "$SLURM_NODEID" "$@"' accelerate-node \
    --config_file "$CONFIG" --main_process_ip "$MAIN_IP" "${LAUNCH_FLAGS[@]}" \
    train.py "${TRAIN_ARGS[@]}"
