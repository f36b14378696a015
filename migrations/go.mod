module github.com/bionicotaku/txmanager-migrations

go 1.26.0
