module github.com/bionicotaku/txmanager-examples/payouts

go 1.26.0

require (
	github.com/bionicotaku/lingo-utils/pglocal v0.0.0
	github.com/bionicotaku/lingo-utils/txmanager v0.0.0
	github.com/bionicotaku/txmanager-service/api v0.0.0
	github.com/bionicotaku/txmanager-service/client v0.0.0
	github.com/bionicotaku/txmanager-service/client/feed v0.0.0
	github.com/go-kratos/kratos/v2 v2.9.2
	github.com/google/uuid v1.6.0
	github.com/google/wire v0.7.0
	github.com/jackc/pgx/v5 v5.12.0
	golang.org/x/crypto v0.57.0
	google.golang.org/grpc v1.83.2
	google.golang.org/protobuf v1.36.12
)

replace github.com/bionicotaku/txmanager-service/client/feed => ../../txmanager-service/client/feed
