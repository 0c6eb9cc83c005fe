# Sourced by bench/gpu_session.sh and bench/gpu_sweep.sh on the GPU machine: the launch environment every benchmark
# process inherits, and the packages the image lacks (carried as wheels in .whl/, installed once per machine):
# deepspeed (+hjson, and pydantic with pydantic-core, annotated-types and typing-inspection, which the image stopped
# carrying on 2026-12-05: deepspeed's config imports it), datasets (+dill, multiprocess), questionary (+prompt_toolkit,
# wcwidth), liger-kernel, torchao, trl (bitsandbytes apart, below); cp312 manylinux wheels (`pip download
# --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl PACKAGE`, --no-deps where the image
# has the rest).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast here
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# .whlq/ holds bitsandbytes' 43 MB wheel alone, carried only by the calls that run QLoRA: beside .whl and the tracked
# files it leaves no room under the 64 MiB a call carries for another folder (.whl525/). Each folder is installed once
# per machine, on the first call that carries it.
for WHEELS in .whl .whlq; do
    if [ -d "$WHEELS" ] && [ ! -f "/tmp/site/.installed$WHEELS" ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            "$WHEELS"/*.whl && touch "/tmp/site/.installed$WHEELS" || exit 1
    fi
done
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
