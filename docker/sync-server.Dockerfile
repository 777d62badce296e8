# The sync server's image (docs/sync-server.md): the release binary on a Debian base.
# `cargo xtask image --sync-server` prepares the build context (the binary) and builds it;
# BASE is the Debian base that `cargo xtask image` makes with debootstrap, or any Debian
# image as new as the build machine's (the binary links glibc only).
ARG BASE=debian:trixie-slim
FROM ${BASE}

COPY pg_automerge_sync_server /usr/local/bin/pg_automerge_sync_server

ENV SYNC_SERVER_LISTEN=0.0.0.0:3030 \
    SYNC_SERVER_LOG_FORMAT=json
EXPOSE 3030
USER nobody
# Set DATABASE_URL (or pass --database-url) to a database where pg_automerge is available.
ENTRYPOINT ["pg_automerge_sync_server"]
