# Stand-in for the upstream `postgres` image on hosts that reach no registry: Debian's
# PostgreSQL 15 with the same entrypoint contract (POSTGRES_USER/PASSWORD/DB on first start, a
# UTF8 cluster, data in /var/lib/postgresql/data, `pg_isready` on PATH).
#   docker build --network host -f docker/standins/postgres.Dockerfile -t local/postgres:15 docker/standins
ARG DEBIAN_IMAGE=local/debian:bookworm
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends postgresql-15 \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
 && rm -rf /var/lib/postgresql/15
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
