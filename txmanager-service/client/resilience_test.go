package txmclient_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// serve runs a fake TxService and AdminService on a loopback port for the test.
func serve(t *testing.T, tx v1.TxServiceServer, admin v1.AdminServiceServer) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	if tx != nil {
		v1.RegisterTxServiceServer(server, tx)
	}
	if admin != nil {
		v1.RegisterAdminServiceServer(server, admin)
	}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	return listener.Addr().String()
}

// newClient is a client of the fakes, closed when the test ends.
func newClient(t *testing.T, cfg txmclient.Config) *txmclient.Client {
	t.Helper()
	client, closeClient, err := txmclient.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClient)
	return client
}

// oneCompletion streams one completion and then holds the stream open.
type oneCompletion struct {
	v1.UnimplementedTxServiceServer
}

func (oneCompletion) WatchCompletions(_ *v1.WatchCompletionsRequest, stream grpc.ServerStreamingServer[v1.Completion]) error {
	if err := stream.Send(&v1.Completion{TxId: "tx-1", Cursor: "1"}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// The handler Watch calls gets the caller's context, not the stream's: its own calls carry
// none of this client's credentials.
func TestWatchHandlersDoNotCarryTheClientsCredentials(t *testing.T) {
	addr := serve(t, oneCompletion{}, nil)
	client := newClient(t, txmclient.Config{Endpoints: []string{addr}, APIKey: "txm_secret_key"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errSeen := errors.New("seen")
	var outgoing metadata.MD
	err := client.Watch(ctx, "", func(ctx context.Context, _ *v1.Completion) error {
		outgoing, _ = metadata.FromOutgoingContext(ctx)
		return errSeen
	})
	if !errors.Is(err, errSeen) {
		t.Fatalf("Watch: %v", err)
	}
	if len(outgoing.Get("x-api-key")) != 0 || len(outgoing.Get("authorization")) != 0 {
		t.Fatalf("the handler's context carries credentials: %v", outgoing)
	}
}

// expiredAtOnce accepts every stream and ends it at once as expired, as the service does
// with a token past its expiry but inside its leeway at the door.
type expiredAtOnce struct {
	v1.UnimplementedTxServiceServer
	opened atomic.Int64
}

func (s *expiredAtOnce) WatchCompletions(_ *v1.WatchCompletionsRequest, stream grpc.ServerStreamingServer[v1.Completion]) error {
	s.opened.Add(1)
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	return v1.ErrorUnauthenticated("the credential that opened this stream expired; open it again with a new one")
}

// A token provider that keeps handing back a token already expired is not asked in a tight
// loop: after one stream opened again at once, Watch waits between streams.
func TestWatchBacksOffWhenEveryTokenHasExpired(t *testing.T) {
	fake := &expiredAtOnce{}
	addr := serve(t, fake, nil)
	client := newClient(t, txmclient.Config{Endpoints: []string{addr}, Backoff: 100 * time.Millisecond,
		BearerToken: func(context.Context) (string, error) { return "the-same-expired-token", nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err := client.Watch(ctx, "", func(context.Context, *v1.Completion) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Watch: %v, want the context's deadline", err)
	}
	// At once twice, then waits of 100, 200, 400 and 800 ms: at most 6 streams in 1.5 s.
	if n := fake.opened.Load(); n < 2 || n > 6 {
		t.Fatalf("%d streams opened in 1.5 s, want 2 to 6", n)
	}
}

// A token provider that fails for a while (an identity service restarting) does not end
// Watch: it asks again after a wait.
func TestWatchOutlastsAFailingTokenProvider(t *testing.T) {
	addr := serve(t, oneCompletion{}, nil)
	var asked atomic.Int64
	client := newClient(t, txmclient.Config{Endpoints: []string{addr}, Backoff: 10 * time.Millisecond,
		BearerToken: func(context.Context) (string, error) {
			if asked.Add(1) <= 3 {
				return "", errors.New("identity provider unavailable")
			}
			return "token", nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errSeen := errors.New("seen")
	if err := client.Watch(ctx, "", func(context.Context, *v1.Completion) error { return errSeen }); !errors.Is(err, errSeen) {
		t.Fatalf("Watch: %v, want the completion handled once the provider answers", err)
	}
}

// outage answers its first reads with the transaction in flight, then UNAVAILABLE for a
// while, as a service restarting does, then the transaction as final.
type outage struct {
	v1.UnimplementedTxServiceServer
	reads                atomic.Int64
	answeredFirst, fails int64
}

func (s *outage) GetTx(_ context.Context, r *v1.GetTxRequest) (*v1.Tx, error) {
	switch n := s.reads.Add(1); {
	case n <= s.answeredFirst:
		return &v1.Tx{TxId: r.GetTxId(), State: "SUBMITTED"}, nil
	case n <= s.answeredFirst+s.fails:
		return nil, v1.ErrorUnavailable("restarting")
	}
	return &v1.Tx{TxId: r.GetTxId(), State: "CONFIRMED"}, nil
}

// Wait goes on through an outage longer than one read's attempts once the service has
// answered for the transaction: it goes on meanwhile, and Wait returns it once it is final.
// A service that never answered (a wrong address, a cluster that is down) ends Wait with
// the error after a read's attempts, rather than a wait without a word.
func TestWaitOutlastsAnOutage(t *testing.T) {
	tests := []struct {
		name          string
		answeredFirst int64
		wantState     string
	}{
		{"an outage after the service answered", 1, "CONFIRMED"},
		{"a service that never answered", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &outage{answeredFirst: tt.answeredFirst, fails: 6}
			addr := serve(t, fake, nil)
			client := newClient(t, txmclient.Config{Endpoints: []string{addr}, MaxAttempts: 2, Backoff: 10 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tx, err := client.Wait(ctx, "00000000-0000-7000-8000-000000000001")
			if tt.wantState == "" {
				if !v1.IsUnavailable(err) || fake.reads.Load() != 2 {
					t.Fatalf("Wait: %v %v after %d reads, want UNAVAILABLE after the 2 attempts of one read", tx, err, fake.reads.Load())
				}
				return
			}
			if err != nil || tx.GetState() != tt.wantState {
				t.Fatalf("Wait: %v %v, want the %s transaction after the outage", tx, err, tt.wantState)
			}
		})
	}
}

// countingReplays answers every replay UNAVAILABLE after carrying it out, as a service
// whose answer was lost does.
type countingReplays struct {
	v1.UnimplementedAdminServiceServer
	replays atomic.Int64
}

func (s *countingReplays) ReplayWebhook(context.Context, *v1.ReplayWebhookRequest) (*v1.Webhook, error) {
	s.replays.Add(1)
	return nil, v1.ErrorUnavailable("answer lost")
}

// A replay is not sent again after an answer that does not say it was refused: a second
// replay would send every event again.
func TestReplayWebhookIsNotRepeatedAfterALostAnswer(t *testing.T) {
	fake := &countingReplays{}
	addr := serve(t, nil, fake)
	client := newClient(t, txmclient.Config{Endpoints: []string{addr}, Backoff: 10 * time.Millisecond})
	if _, err := client.ReplayWebhook(context.Background(), "8f7e2c34-6a51-4a38-9f5e-3b2d9c0a1e77", 0); !v1.IsUnavailable(err) {
		t.Fatalf("ReplayWebhook: %v, want the UNAVAILABLE answer", err)
	}
	if n := fake.replays.Load(); n != 1 {
		t.Fatalf("replay sent %d times, want once", n)
	}
}

// New refuses to send credentials in plaintext to another machine unless told that
// something else encrypts the connection; on loopback, with TLS or without credentials it
// connects.
func TestNewRefusesCredentialsInPlaintextToAnotherMachine(t *testing.T) {
	token := func(context.Context) (string, error) { return "jwt", nil }
	for _, tc := range []struct {
		name    string
		cfg     txmclient.Config
		refused bool
	}{
		{"api key to a remote host", txmclient.Config{Endpoints: []string{"txmanager.internal:9090"}, APIKey: "k"}, true},
		{"token to a remote address", txmclient.Config{Endpoints: []string{"10.0.0.7:9090"}, BearerToken: token}, true},
		{"api key to a dns target", txmclient.Config{Endpoints: []string{"dns:///txmanager.internal:9090"}, APIKey: "k"}, true},
		{"one remote endpoint among loopback ones", txmclient.Config{Endpoints: []string{"127.0.0.1:9090", "txm-2:9090"}, APIKey: "k"}, true},
		{"api key to loopback", txmclient.Config{Endpoints: []string{"127.0.0.1:9090", "localhost:9091", "[::1]:9092", "[::1]", "dns:///127.0.0.1:9090"}, APIKey: "k"}, false},
		{"api key to a unix socket", txmclient.Config{Endpoints: []string{"unix:///run/txm.sock", "unix-abstract:txm"}, APIKey: "k"}, false},
		{"api key over TLS", txmclient.Config{Endpoints: []string{"txmanager.internal:9090"}, APIKey: "k", TLS: &tls.Config{MinVersion: tls.VersionTLS12}}, false},
		{"api key through a mesh", txmclient.Config{Endpoints: []string{"txmanager.internal:9090"}, APIKey: "k", PlaintextCredentials: true}, false},
		{"no credentials", txmclient.Config{Endpoints: []string{"txmanager.internal:9090"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, closeClient, err := txmclient.New(context.Background(), tc.cfg)
			if err == nil {
				closeClient()
			}
			if refused := errors.Is(err, txmclient.ErrPlaintextCredentials); refused != tc.refused {
				t.Fatalf("New: %v, want refused %v", err, tc.refused)
			}
			if !tc.refused && err != nil {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

// freezingProxy is a TCP proxy whose connections can be frozen: their bytes stop and their
// sockets stay open, as a route a NAT or a load balancer dropped leaves them. Connections
// made after a freeze are live.
type freezingProxy struct {
	addr   string
	mu     sync.Mutex
	frozen []*atomic.Bool
}

func startFreezingProxy(t *testing.T, upstream string) *freezingProxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close() })
	p := &freezingProxy{addr: listener.Addr().String()}
	go func() {
		for {
			down, err := listener.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = down.Close()
				continue
			}
			t.Cleanup(func() { _ = down.Close(); _ = up.Close() })
			frozen := new(atomic.Bool)
			p.mu.Lock()
			p.frozen = append(p.frozen, frozen)
			p.mu.Unlock()
			pass := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						return
					}
					if !frozen.Load() {
						if _, err := dst.Write(buf[:n]); err != nil {
							return
						}
					}
				}
			}
			go pass(up, down)
			go pass(down, up)
		}
	}()
	return p
}

// freeze stops every connection made so far.
func (p *freezingProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frozen {
		f.Store(true)
	}
}

// streamPerCursor sends, on each stream, the completion after the stream's cursor, then
// holds the stream open.
type streamPerCursor struct {
	v1.UnimplementedTxServiceServer
}

func (streamPerCursor) WatchCompletions(req *v1.WatchCompletionsRequest, stream grpc.ServerStreamingServer[v1.Completion]) error {
	next, _ := strconv.Atoi(req.GetAfter())
	if err := stream.Send(&v1.Completion{TxId: fmt.Sprint("tx-", next+1), Cursor: strconv.Itoa(next + 1)}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// A completions stream whose route went dead without a word (no reset reaches the client)
// is noticed by the connection's pings, and opened again from its cursor. Before, the
// client waited on it for the operating system's TCP keepalive, two hours on Linux,
// delivering nothing and raising nothing.
func TestWatchNoticesARouteThatWentDeadWithoutAWord(t *testing.T) {
	t.Parallel()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}))
	v1.RegisterTxServiceServer(server, streamPerCursor{})
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	proxy := startFreezingProxy(t, listener.Addr().String())

	client := newClient(t, txmclient.Config{Endpoints: []string{proxy.addr}, KeepAlive: 10 * time.Second, Backoff: 50 * time.Millisecond})
	handled := make(chan string, 8)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		_ = client.Watch(ctx, "", func(_ context.Context, c *v1.Completion) error {
			handled <- c.GetCursor()
			return nil
		})
	}()
	if got := <-handled; got != "1" {
		t.Fatalf("first completion at cursor %s, want 1", got)
	}
	proxy.freeze()
	select {
	case got := <-handled:
		if got != "2" {
			t.Fatalf("after the route died, the stream went on at cursor %s, want 2", got)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("45s after the route died, the stream had not been opened again")
	}
}
