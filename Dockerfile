# One image per Gantry binary, made from a static binary built beforehand: no toolchain, no
# base image, no RUN, so it builds offline and without a Docker daemon (buildah, podman, docker).
#
# The build context is a directory holding the binaries and the CA certificates to ship, as
# `scripts/images` prepares it in target/static/context:
#   ca-certificates.crt   (e.g. /etc/ssl/certs/ca-certificates.crt)
#   gantry-provisioner    (static: RUSTFLAGS="-C target-feature=+crt-static",
#   gantry-storage         --target x86_64-unknown-linux-gnu, or a musl target)
#   gantry-unpack         (static too; shipped in the provisioner's image)
#
#   buildah bud --build-arg BINARY=gantry-provisioner -t gantry-provisioner:0.1.0    target/static/context
#   buildah bud --build-arg BINARY=gantry-storage     -t gantry-storage-server:0.1.0 target/static/context
#
# BINARY names the binary, and the stage below that ships it. Dockerfile.build builds the
# binaries too, on a machine that can pull rust and distroless images.
ARG BINARY=gantry-provisioner

FROM scratch AS base
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65532:65532

FROM base AS gantry-provisioner
COPY gantry-provisioner /usr/local/bin/gantry-provisioner
# The unpack program of pullMode: Node, copied by unpack Pods into their bundle image's Pod.
COPY gantry-unpack /usr/local/bin/gantry-unpack
ENTRYPOINT ["/usr/local/bin/gantry-provisioner"]

FROM base AS gantry-storage
COPY gantry-storage /usr/local/bin/gantry-storage
ENTRYPOINT ["/usr/local/bin/gantry-storage"]

FROM ${BINARY}
