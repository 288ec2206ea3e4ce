# Stand-in for the upstream `redis` image on hosts that reach no registry: Debian's redis-server
# (`redis-server` and `redis-cli` on PATH). Debian's build starts in protected mode, which refuses
# other containers: the compose file passes `--protected-mode no` (the upstream image's default).
ARG DEBIAN_IMAGE=local/debian:bookworm
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends redis-server \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*
USER redis
WORKDIR /var/lib/redis
EXPOSE 6379
CMD ["redis-server", "--protected-mode", "no"]
