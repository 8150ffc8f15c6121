# Aleph, CPU image.
#   docker build -t aleph:cpu .
#   docker run -p 7997:7997 -v aleph-models:/data aleph:cpu v2 --model-id sentence-transformers/all-MiniLM-L6-v2
# Configuration only through flags or ALEPH_* / INFINITY_* environment variables.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY crates crates
COPY bench bench
RUN cargo build --release --locked -p aleph-server \
 && cp target/release/aleph /usr/local/bin/aleph

FROM debian:bookworm-slim
# curl for the HEALTHCHECK, ca-certificates for hub downloads.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --create-home --home-dir /home/aleph aleph \
 && mkdir -p /data \
 && chown aleph:aleph /data
COPY --from=build /usr/local/bin/aleph /usr/local/bin/aleph
# Models live in a mounted cache volume.
ENV HF_HOME=/data/huggingface \
    ALEPH_HOST=0.0.0.0 \
    ALEPH_PORT=7997
VOLUME ["/data"]
USER 10001
EXPOSE 7997
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
  CMD ["curl", "-fsS", "http://127.0.0.1:7997/health"]
ENTRYPOINT ["aleph"]
CMD ["v2"]
