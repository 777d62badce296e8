# Where the install tests install the Debian packages as a user would
# (xtask/src/package_install.rs): a clean Debian with Debian's PostgreSQL of one major, and
# systemd as its init so that the server and the sync server run as their units say. BASE
# is the Debian base `cargo xtask image` makes with debootstrap for that major.
ARG BASE
FROM ${BASE}
# Valid-Until is not checked: the machine's mirror may be a snapshot, whose unstable
# suite's Release file has expired (debootstrap, which made the base, does not check it).
RUN apt-get update -qq -o Acquire::Check-Valid-Until=false \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd systemd-sysv \
    && rm -rf /var/lib/apt/lists/*
STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
