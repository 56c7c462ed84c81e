# sluice and mock-llm in one small image (used by docker-compose.yml).
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 sluice     # config/examples/container.yaml (admin inside only)
#   docker run --rm -p 8080:8080 -p 127.0.0.1:9901:9901 -v $PWD/my.yaml:/etc/sluice/sluice.yaml:ro sluice
#     (my.yaml with admin on 0.0.0.0:9901, published on the host's loopback only)
# Build stage: the same Debian packages as scripts/setup (minus the test-only ones).
FROM debian:bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config \
      libevent-dev libnghttp2-dev libssl-dev libyaml-cpp-dev prometheus-cpp-dev \
      node-llhttp libhttp-parser-dev nlohmann-json3-dev libfmt-dev libhiredis-dev libmimalloc-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_TESTS=OFF \
 && cmake --build /build --target sluice mock-llm \
 && strip /build/sluice /build/tools/mock-llm

# Runtime stage: only the shared libraries the two binaries link.
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libevent-core-2.1-7 libevent-extra-2.1-7 libevent-pthreads-2.1-7 libevent-openssl-2.1-7 \
      libnghttp2-14 libssl3 libyaml-cpp0.7 libprometheus-cpp-core1.0 libhttp-parser2.9 libfmt9 libhiredis0.14 libmimalloc2.0 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --no-create-home --shell /usr/sbin/nologin sluice
COPY --from=build /build/sluice /build/tools/mock-llm /usr/local/bin/
COPY config/examples/ /etc/sluice/examples/
# The default config needs no mock and no API key: it starts and answers /healthz.
COPY config/examples/container.yaml /etc/sluice/sluice.yaml
USER sluice
# 8080: proxy listener, 9901: admin (/metrics, /ready, /healthz), 9000: mock-llm
EXPOSE 8080 9901 9000
# No curl in the image: sluice probes itself (exit 0 on 2xx). /ready turns 503
# while draining. A config with another admin port needs --health-cmd.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["sluice", "--health-check", "http://127.0.0.1:9901/ready"]
CMD ["sluice", "--config", "/etc/sluice/sluice.yaml"]
