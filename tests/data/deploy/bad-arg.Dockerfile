# D1 through a global ARG: the default names an unpinned image.
ARG BASE=debian:latest
FROM ${BASE}
USER 10001
VOLUME ["/etc/rumor/keys", "/var/lib/rumor/checkpoints"]
ENTRYPOINT ["rumor"]
