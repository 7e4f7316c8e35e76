# Agent/PS image for machines that reach a registry: `edgebed image build --mode dockerfile`.
# Offline machines use the default mode instead (an imported empty rootfs + read-only host mounts),
# see edgebed/emulator/runtimes/docker/images.py. Legacy builder compatible (no BuildKit-only syntax).
FROM python:3.11-slim

# CPU-only torch keeps the image small; override for another build, e.g. --build-arg TORCH_SPEC=torch==2.13.0
ARG TORCH_SPEC="torch"
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

WORKDIR /opt/edgebed
RUN pip install --no-cache-dir "${TORCH_SPEC}"
COPY pyproject.toml setup.py ./
COPY edgebed ./edgebed
# No C compiler in the slim image: the optional compiled push path is skipped, the PS runs its numpy path,
# and portable numerics' own products (edgebed/_gemm.c) too: agents here compute Linear/Conv2d with torch's
# portable-pinned kernels (real-time runs are not bit-reproducible in any case, docs/reproducibility.md).
RUN pip install --no-cache-dir ".[docker]"

LABEL edgebed="1" edgebed.image="dockerfile"
CMD ["python", "-m", "edgebed.device_agent", "--help"]
