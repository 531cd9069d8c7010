# Breaks every rule check-dockerfile.sh knows (tests/integration/test_deploy.c).
FROM debian AS build
FROM ubuntu:latest
ENV API_TOKEN=abc
ARG SECRET_KEY
ADD https://example.com/x.tar.gz /x
COPY keys/ /etc/rumor/keys/
COPY run/node-0.key /etc/rumor/
RUN apt-get update && apt-get install libzmq5 no-such-package-rumor && apt-get upgrade
USER root
ENTRYPOINT rumor node
