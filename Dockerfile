# Small static image of txmanager-service.
#   docker build -t txmanager-service .
#   docker run -p 8080:8080 -p 9090:9090 -v /etc/txmanager:/etc/txmanager:ro \
#     -e DATABASE_URL=... -e DATABASE_MIGRATION_URL=... -e CHAIN_RPC_URL=... \
#     txmanager-service -conf /etc/txmanager/config.yaml
# (See configs/production.example.yaml. The image has no shell and runs as nonroot.)

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Module files first, so dependency downloads are cached across source changes.
COPY go.work ./
COPY lingo-utils/txmanager/go.mod lingo-utils/txmanager/go.sum lingo-utils/txmanager/
COPY lingo-utils/pglocal/go.mod lingo-utils/pglocal/go.sum lingo-utils/pglocal/
COPY migrations/go.mod migrations/
COPY txmanager-service/go.mod txmanager-service/go.sum txmanager-service/
COPY txmanager-service/api/go.mod txmanager-service/api/go.sum txmanager-service/api/
COPY txmanager-service/client/go.mod txmanager-service/client/go.sum txmanager-service/client/
# go.work names the example too; without its go.mod no go command runs in this stage.
COPY examples/payouts/go.mod examples/payouts/
RUN cd txmanager-service && go mod download
COPY . .
ARG VERSION=dev
# CGO off: go-ethereum falls back to its pure-Go secp256k1, and the binary is fully static.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.Version=${VERSION}" \
      -o /out/txmanager-service ./txmanager-service/cmd/txmanager-service

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/txmanager-service /usr/local/bin/txmanager-service
EXPOSE 8080 9090
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/txmanager-service"]
