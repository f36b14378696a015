package repositories

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// registerPoolMetrics exposes the pool's size and its waits. A pool too small for the node's
// work shows as acquires that wait: writer batches, pipeline passes and lease renewals then
// queue for a connection instead of for the database.
func registerPoolMetrics(pool *pgxpool.Pool, metrics *telemetry.Metrics) error {
	return errors.Join(
		metrics.RegisterGauge(telemetry.DatabasePoolMaxConnections,
			"The most connections the pool opens (database.maxConns, or 4 per core between 8 and 32 when it is 0).",
			func(_ context.Context, record func(int64, ...attribute.KeyValue)) {
				record(int64(pool.Stat().MaxConns()))
			}),
		metrics.RegisterGauge(telemetry.DatabasePoolConnections,
			"The pool's connections by state: acquired (in use), idle, constructing (being opened).",
			func(_ context.Context, record func(int64, ...attribute.KeyValue)) {
				stat := pool.Stat()
				record(int64(stat.AcquiredConns()), attribute.String("state", "acquired"))
				record(int64(stat.IdleConns()), attribute.String("state", "idle"))
				record(int64(stat.ConstructingConns()), attribute.String("state", "constructing"))
			}),
		metrics.RegisterCounter(telemetry.DatabasePoolAcquireWaitsTotal,
			"Acquires that found no idle connection and waited for one to be released or opened.",
			func() int64 { return pool.Stat().EmptyAcquireCount() }),
		metrics.RegisterFloatCounter(telemetry.DatabasePoolAcquireWaitSecondsTotal,
			"Time acquires spent waiting for a connection to be released or opened, in seconds.",
			func() float64 { return pool.Stat().EmptyAcquireWaitTime().Seconds() }),
	)
}
