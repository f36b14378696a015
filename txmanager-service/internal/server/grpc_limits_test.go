package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// openStream opens a WatchCompletions stream with the given metadata and reads its first
// completion: the stream is open on the server when this returns without an error.
func openStream(t *testing.T, txs v1.TxServiceClient, md ...string) (v1.TxService_WatchCompletionsClient, context.CancelFunc, error) {
	t.Helper()
	ctx, cancel := outgoing(md...)
	stream, err := txs.WatchCompletions(ctx, &v1.WatchCompletionsRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return stream, cancel, nil
}

func withCompletions(s *stack, n int) {
	for i := 1; i <= n; i++ {
		s.feed.items = append(s.feed.items, services.Completion{ChainID: testChainID, TxID: uuid.New(), Signer: signerA, Nonce: uint64(i),
			Status: domain.StateConfirmed, CompletedAt: time.Now(), Position: services.FeedPosition(i)})
	}
}

// refusedAs checks that err is the gRPC code with the API reason.
func refusedAs(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || kerrors.FromError(err).Reason != reason {
		t.Fatalf("%s: %v, want %v %s", what, err, code, reason)
	}
}

// A credential holds at most server.maxStreamsPerCredential streams open on a node, and
// opening one costs a request of its rate; another credential's share is its own.
func TestStreamsAreHeldToTheirCredentialsShare(t *testing.T) {
	t.Parallel()
	t.Run("open streams", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) { c.Server.MaxStreamsPerCredential = 2 }})
		withCompletions(s, 3)
		s.serveGRPC(t, &TLSConfigs{})
		txs := v1.NewTxServiceClient(dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials()))
		_, closeFirst, err := openStream(t, txs, "x-api-key", clientKey)
		if err != nil {
			t.Fatal(err)
		}
		_, closeSecond, err := openStream(t, txs, "x-api-key", clientKey)
		if err != nil {
			t.Fatal(err)
		}
		defer closeSecond()
		_, _, err = openStream(t, txs, "x-api-key", clientKey)
		refusedAs(t, "a third stream of one credential", err, codes.ResourceExhausted, "RATE_LIMITED")
		_, closeOther, err := openStream(t, txs, "x-api-key", adminKey)
		if err != nil {
			t.Fatalf("another credential's stream: %v", err)
		}
		defer closeOther()
		closeFirst()
		// The server sees the first stream end a moment after its client closes it.
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, closeThird, err := openStream(t, txs, "x-api-key", clientKey)
			if err == nil {
				closeThird()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a stream after one of two closed: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("the rate of opening", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) {
			c.Server.RateLimit = conf.RateLimit{Enabled: true, RequestsPerSecond: 0.1, Burst: 1}
		}})
		withCompletions(s, 1)
		s.serveGRPC(t, &TLSConfigs{})
		txs := v1.NewTxServiceClient(dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials()))
		_, closeFirst, err := openStream(t, txs, "x-api-key", clientKey)
		if err != nil {
			t.Fatal(err)
		}
		defer closeFirst()
		_, _, err = openStream(t, txs, "x-api-key", clientKey)
		refusedAs(t, "a second stream at 0.1 a second", err, codes.ResourceExhausted, "RATE_LIMITED")
		if retry := kerrors.FromError(err).Metadata[controllers.MetadataRetryAfter]; retry != "10" {
			t.Fatalf("retry after %q seconds, want 10 (metadata %v)", retry, kerrors.FromError(err).Metadata)
		}
	})
}

// A token is checked when its stream opens; the stream ends when the token expires, with
// UNAUTHENTICATED, instead of serving its holder past its expiry.
func TestAStreamEndsWhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef-hmac")
	s := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) {
		c.Auth.JWT = conf.JWT{HMACSecretFile: writeFile(t, t.TempDir(), "secret", secret), SignersClaim: "signers"}
	}})
	withCompletions(s, 1)
	s.serveGRPC(t, &TLSConfigs{})
	txs := v1.NewTxServiceClient(dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials()))
	// The parser's leeway (30 s) admits a token that expired a moment ago; the stream still
	// ends at the expiry the token states.
	// (A token's times are whole seconds.)
	expiry := time.Now().Add(2 * time.Second).Truncate(time.Second)
	token := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "watcher", "exp": jwt.NewNumericDate(expiry), "signers": "*"})
	stream, closeStream, err := openStream(t, txs, "authorization", "Bearer "+token)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStream()
	_, err = stream.Recv()
	ended := time.Now()
	refusedAs(t, "a stream past its token's expiry", err, codes.Unauthenticated, "UNAUTHENTICATED")
	if early := expiry.Sub(ended); early > 100*time.Millisecond {
		t.Fatalf("the stream ended %v before its token expired", early)
	}
}

// gRPC health checks answer from the readiness probe: NOT_SERVING when /readyz would be
// 503 and while the server stops; an unknown service is NotFound.
func TestGRPCHealthFollowsReadiness(t *testing.T) {
	t.Parallel()
	unreachable, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unreachable.Close)
	check := func(conn healthpb.HealthClient, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := conn.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		return resp.GetStatus(), err
	}
	tests := []struct {
		name    string
		unready bool
		stop    bool
		service string
		want    healthpb.HealthCheckResponse_ServingStatus
		code    codes.Code
	}{
		{name: "ready", want: healthpb.HealthCheckResponse_SERVING},
		{name: "the API's service by name", service: v1.TxService_ServiceDesc.ServiceName, want: healthpb.HealthCheckResponse_SERVING},
		{name: "the database unreachable", unready: true, want: healthpb.HealthCheckResponse_NOT_SERVING},
		{name: "stopping", stop: true, want: healthpb.HealthCheckResponse_NOT_SERVING},
		{name: "an unknown service", service: "no.such.Service", code: codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, stackOptions{})
			if tt.unready {
				s.health = NewHealth(s.conf.Server, unreachable, replication("none"), []ReadinessChain{{ID: testChainID, Chain: s.chain}}, s.health.metrics)
			}
			s.serveGRPC(t, &TLSConfigs{})
			conn := healthpb.NewHealthClient(dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials()))
			if tt.stop {
				s.streams.Close()
			}
			got, err := check(conn, tt.service)
			if status.Code(err) != tt.code || (err == nil && got != tt.want) {
				t.Fatalf("%v %v, want %v %v", got, err, tt.want, tt.code)
			}
		})
	}
	t.Run("a watcher is told of the change", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOptions{})
		s.serveGRPC(t, &TLSConfigs{})
		conn := healthpb.NewHealthClient(dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials()))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		watch, err := conn.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			resp, err := watch.Recv()
			if err != nil {
				if ctx.Err() != nil {
					t.Fatalf("the watch did not end at the stop: %v after %v", err, got)
				}
				break
			}
			got = append(got, resp.GetStatus().String())
			if len(got) == 1 {
				s.streams.Close()
			}
		}
		if fmt.Sprint(got) != "[SERVING]" {
			t.Fatalf("watched %v, want [SERVING] then the end of the stream at the stop", got)
		}
	})
}
