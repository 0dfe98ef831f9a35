# The kubeplug host: `docker build -t kubeplug:0.1.0 .` from the repository root. The image
# holds only the binary; plugins come from a volume (examples/deploy/README.md).

# Build and runtime stages share a Debian release, so the binary finds the glibc it was
# linked against.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kubeplug \
    && cp target/release/kubeplug /usr/local/bin/kubeplug

# glibc and libgcc, no shell, no package manager; TLS is rustls, so no OpenSSL either.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/kubeplug /usr/local/bin/kubeplug
# distroless's `nonroot` user, numerically, so that `runAsNonRoot` can verify it.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kubeplug"]
