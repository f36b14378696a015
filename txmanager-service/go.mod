module github.com/bionicotaku/txmanager-service

go 1.26.0

replace (
	github.com/bionicotaku/lingo-utils/pglocal => ../lingo-utils/pglocal
	github.com/bionicotaku/lingo-utils/txmanager => ../lingo-utils/txmanager
)
