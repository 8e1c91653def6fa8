# switchboard in a container: built from this tree on Debian 12, run on Debian 12 slim with the
# shared libraries only. `docker build -t switchboard .`, then
#   docker run --rm -p 8080:8080 -v $PWD/my.yaml:/etc/switchboard/switchboard.yaml switchboard
# The configuration must listen on 0.0.0.0 to be reachable from outside the container (the
# packaged demo configuration listens on loopback). `docker run ... switchboard demo --help`
# and the other commands work as on a host.
FROM debian:12 AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc make pkg-config libuv1-dev liburing-dev libhttp-parser-dev \
    libjsmn-dev libyaml-dev libxxhash-dev libssl-dev libnghttp2-dev libzmq3-dev libmsgpack-dev \
    protobuf-c-compiler libprotobuf-c-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make build/switchboard && make install PREFIX=/usr DESTDIR=/out

FROM debian:12-slim
# The libraries build/switchboard links (tests/integration/test_install.py checks this list
# against the binary's NEEDED entries).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libuv1 libhttp-parser2.9 libyaml-0-2 libxxhash0 \
    libssl3 libnghttp2-14 liburing2 libzmq5 libprotobuf-c1 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/usr/bin/switchboard /usr/bin/switchboard
COPY --from=build /out/etc/switchboard /etc/switchboard
COPY --from=build /out/usr/share/doc/switchboard /usr/share/doc/switchboard
USER nobody
EXPOSE 8080 8081
# SIGTERM drains (in-flight requests finish, up to shutdown.drain_ms): give `docker stop` -t 45.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/switchboard"]
CMD ["serve", "-c", "/etc/switchboard/switchboard.yaml"]
