# syntax=docker/dockerfile:1.6
#
# The SpMV service (and the trainer) in one image.
#
#   docker build -t spmv .
#   docker compose up server            # needs the NVIDIA Container Toolkit for the GPU
#   docker compose run --rm trainer     # one-off: time the corpus on the device, fit models/
#
# Stage 1 builds the release binaries; stage 2 is a slim runtime with the OpenCL
# ICD loader, the NVIDIA ICD entry, and PoCL as the CPU fallback when no GPU is
# passed through (the server then still predicts and multiplies, on the CPU).

############################ builder ############################
FROM rust:1-bookworm AS builder

# ocl links against libOpenCL.so: the ICD loader's development package.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ocl-icd-opencl-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# Registry and target caches survive between builds (BuildKit); the binaries are
# copied out of the cached target dir within the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p server --bins \
 && mkdir -p /out/bin /out/models /out/training-data \
 && cp target/release/server target/release/loadgen /out/bin/ \
 && if cargo metadata --no-deps --format-version 1 | grep -q '"name":"trainer"'; then \
        cargo build --release --locked -p trainer && cp target/release/trainer /out/bin/; \
    fi

# The shipped models and the trainer's corpus manifest, when the checkout has them
# (copied here so that a checkout without models/ still builds).
RUN if [ -d models ]; then cp -r models/. /out/models/; fi \
 && if [ -d training-data ]; then cp -r training-data/. /out/training-data/; fi

############################ runtime ############################
FROM debian:bookworm-slim AS runtime

# ocl-icd-libopencl1: the ICD loader every OpenCL program links to.
# pocl-opencl-icd:    the portable CPU device, the fallback without a GPU;
#                     binutils provides the linker PoCL's kernel compiler calls.
# clinfo:             to see, inside the container, which devices OpenCL finds.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        ocl-icd-libopencl1 pocl-opencl-icd binutils clinfo ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# The NVIDIA Container Toolkit mounts the driver's libnvidia-opencl.so.1 into the
# container (with the `compute` driver capability) but not an ICD file naming it;
# this entry lets the loader find the GPU.
RUN mkdir -p /etc/OpenCL/vendors \
 && echo "libnvidia-opencl.so.1" > /etc/OpenCL/vendors/nvidia.icd

# An unprivileged user; /data holds the results database, /app/models the models.
RUN useradd --system --create-home --home-dir /app spmv \
 && mkdir -p /data /app/models /app/.cache/pocl \
 && chown -R spmv /data /app
WORKDIR /app

COPY --from=builder /out/bin/ /usr/local/bin/
# The shipped models (possibly none: the server then plans with the rule
# baseline); the compose file mounts a volume over this folder.
COPY --from=builder --chown=spmv /out/models/ /app/models/
COPY --from=builder --chown=spmv /out/training-data/ /app/training-data/

USER spmv
ENV SPMV_BIND=0.0.0.0:8080 \
    DATABASE_URL=sqlite:///data/spmv.db \
    SPMV_MODELS_DIR=/app/models \
    POCL_CACHE_DIR=/app/.cache/pocl \
    RUST_LOG=info
EXPOSE 8080
VOLUME ["/data"]

# No curl in the image: bash's /dev/tcp asks /healthz for its status line.
HEALTHCHECK --interval=30s --timeout=3s --start-period=60s \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]

ENTRYPOINT ["/usr/local/bin/server"]
