# Python 3.11 base for the gpujobs images on a Debian bookworm root filesystem, for hosts that cannot
# pull `python:3.11-slim` (scripts/docker-base-images.sh builds it as local/python:3.11-bookworm).
# Provides what the images expect of the upstream image: `python` on PATH, `python -m venv`,
# groupadd/useradd, and the CA bundle pip uses (the host's, which may hold a proxy's CA).
#   docker build --network host -f docker/base/python.Dockerfile -t local/python:3.11-bookworm CTX
# CTX holds ca-certificates.crt.
ARG DEBIAN_IMAGE=local/debian:bookworm
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      python3 python3-venv python-is-python3 ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*
COPY ca-certificates.crt /etc/ssl/certs/host-ca-bundle.crt
ENV PIP_CERT=/etc/ssl/certs/host-ca-bundle.crt \
    SSL_CERT_FILE=/etc/ssl/certs/host-ca-bundle.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/host-ca-bundle.crt \
    AWS_CA_BUNDLE=/etc/ssl/certs/host-ca-bundle.crt
CMD ["python"]
